package programname

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/suggest"
	"github.com/hermesbox/hbx/supervisor"
)

// programNameError is a program name the running supervisor does not
// have, said as helpfully as the configuration allows. It wraps
// supervisor.ErrUnknownProgram (exit 2).
type programNameError struct{ msg string }

// Error returns the message.
func (e *programNameError) Error() string { return e.msg }

// Unwrap returns supervisor.ErrUnknownProgram.
func (e *programNameError) Unwrap() error { return supervisor.ErrUnknownProgram }

// Check returns nil when the supervisor runs a program of every
// name in names ("all" counts when allowAll), else an error for each name
// it does not, joined with "; ": a program cfg disables is named as such
// (`program "hermes" is disabled (programs.hermes.enabled: false)`), any
// other name gets the supervisor's programs and a "did you mean" when one
// is near. known lists the supervisor's programs. The error wraps
// supervisor.ErrUnknownProgram.
func Check(cfg *config.Config, known, names []string, allowAll bool) error {
	var msgs []string
	for _, n := range names {
		if slices.Contains(known, n) || allowAll && n == "all" {
			continue
		}
		if p, ok := programOf(cfg, n); ok && !p.Enabled {
			msgs = append(msgs, fmt.Sprintf("program %q is disabled (programs.%s.enabled: false)", n, n))
			continue
		}
		hint := ""
		if c := suggest.Closest(n, known); c != "" {
			hint = fmt.Sprintf("; did you mean %q?", c)
		}
		msgs = append(msgs, fmt.Sprintf("%v: %q (programs: %s%s)", supervisor.ErrUnknownProgram, n, strings.Join(known, ", "), hint))
	}
	if len(msgs) == 0 {
		return nil
	}
	return &programNameError{strings.Join(msgs, "; ")}
}

// supervisedNames returns the names of the programs the supervisor behind c
// runs, in its order.
func supervisedNames(ctx context.Context, c *supervisor.Client) ([]string, error) {
	sts, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(sts))
	for i, s := range sts {
		names[i] = s.Name
	}
	return names, nil
}

// programOf returns cfg's program name, if cfg (which may be nil) has one.
func programOf(cfg *config.Config, name string) (config.Program, bool) {
	if cfg == nil {
		return config.Program{}, false
	}
	p, ok := cfg.Programs[name]
	return p, ok
}

// CheckSupervised is Check against the programs the
// supervisor behind c runs (supervisedNames): the hints hbx status gives,
// before a command acts on names.
func CheckSupervised(ctx context.Context, c *supervisor.Client, cfg *config.Config, names []string, allowAll bool) error {
	known, err := supervisedNames(ctx, c)
	if err != nil {
		return err
	}
	return Check(cfg, known, names, allowAll)
}
