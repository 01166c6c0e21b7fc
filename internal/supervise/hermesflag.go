package supervise

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/supervisor"
)

// externalSupervisorFlag is the flag newer Hermes releases take to be
// told they run under a supervisor (with HERMES_GATEWAY_EXTERNAL_SUPERVISOR
// in their environment, which every release reads).
const externalSupervisorFlag = "--external-supervisor"

// helpProbeWait bounds the `gateway run --help` probe (Python starts
// slowly on a busy box).
const helpProbeWait = 30 * time.Second

// withExternalSupervisorFlag appends externalSupervisorFlag to the
// command of each program that runs `... gateway run` without it when
// that Hermes lists the flag: `<command> gateway run --help` is run once,
// before the supervisor starts (its reaper would take the probe's exit
// status), as the program's user in its directory with its environment.
// A probe that fails or does not name the flag leaves the command as it
// is; both are logged.
func withExternalSupervisorFlag(ctx context.Context, progs []supervisor.Program, log *slog.Logger) {
	for i := range progs {
		p := &progs[i]
		if p.Build != nil || !isGatewayRun(p.Command) || slices.Contains(p.Command, externalSupervisorFlag) {
			continue
		}
		has, err := helpNamesFlag(ctx, *p)
		switch {
		case err != nil:
			log.Warn("probe the Hermes gateway for "+externalSupervisorFlag+"; starting it without the flag", "program", p.Name, "err", err)
		case has:
			p.Command = append(slices.Clone(p.Command), externalSupervisorFlag)
			log.Info("the installed Hermes takes "+externalSupervisorFlag+": added", "program", p.Name)
		default:
			log.Info("the installed Hermes has no "+externalSupervisorFlag+" (older release): HERMES_GATEWAY_EXTERNAL_SUPERVISOR alone tells it", "program", p.Name)
		}
	}
}

// isGatewayRun reports whether argv runs `gateway run` (arguments 1 and 2).
func isGatewayRun(argv []string) bool {
	return len(argv) >= 3 && argv[1] == "gateway" && argv[2] == "run"
}

// helpNamesFlag runs `<argv0> gateway run --help` as p's user and reports
// whether its output names externalSupervisorFlag.
func helpNamesFlag(ctx context.Context, p supervisor.Program) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, helpProbeWait)
	defer cancel()
	env := append([]string{"PATH=" + supervisor.DefaultPath}, p.Environment...)
	path := p.Command[0]
	if !strings.Contains(path, "/") {
		path = lookPathIn(path, envValue(env, "PATH"))
	}
	cmd := exec.CommandContext(ctx, path, "gateway", "run", "--help")
	cmd.Env = env
	if st, err := os.Stat(p.Directory); err == nil && st.IsDir() {
		cmd.Dir = p.Directory
	}
	cred, err := account.Lookup(p.User)
	if err != nil {
		return false, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), externalSupervisorFlag) {
		return true, nil
	}
	return false, err
}

// lookPathIn finds name in the colon-separated dirs; name when it is in
// none (the probe then fails naming it).
func lookPathIn(name, dirs string) string {
	for _, d := range filepath.SplitList(dirs) {
		f := filepath.Join(d, name)
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return f
		}
	}
	return name
}

// envValue returns key's last value in env.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}
