package verbopts

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/supervisor"
)

// CheckProgramUsers returns nil when the user of every enabled program of
// cfg but the built-in executor (whose executor.user hbx creates) exists
// (account.IDs: a name the user database lists, or a uid), else one error
// for them all, each part
// naming the program, its user and what to do (create the user, or set
// programs.NAME.enabled: false or another programs.NAME.user), joined
// with "; ". It wraps supervisor.ErrInvalid (exit 2): hbx supervise
// refuses such a configuration at boot, and hbx config show says so
// first.
func CheckProgramUsers(cfg *config.Config) error {
	var msgs []string
	for _, name := range slices.Sorted(maps.Keys(cfg.Programs)) {
		pc := cfg.Programs[name]
		if !pc.Enabled || name == config.ExecutorProgram {
			continue
		}
		if pc.User == "" {
			continue
		}
		if _, _, err := account.IDs(pc.User); err != nil {
			msgs = append(msgs, fmt.Sprintf("program %q: %v: create the user, or set programs.%s.enabled: false or another programs.%s.user", name, err, name, name))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", supervisor.ErrInvalid, strings.Join(msgs, "; "))
}
