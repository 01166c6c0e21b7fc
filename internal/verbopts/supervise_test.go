package verbopts

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/internal/certsdir"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/supervisor"
)

func TestSuperviseOptions(t *testing.T) {
	path := writeConfig(t, `supervisor:
  log_dir: /logs
programs:
  hermes:
    enabled: false
  worker:
    command: /bin/worker --fast
    environment: {B: 2, A: 1}
    stopsignal: sigint
    stopwaitsecs: 3
    stdout_logfile: /elsewhere/w.log
`)
	cfg, _, err := config.Load(config.LoadOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	opts := Supervisor(Supervise{Config: cfg})
	if opts.Env != nil {
		t.Errorf("Env = %q, want nil (nothing of hbx's own environment)", opts.Env)
	}
	if len(opts.Programs) != 2 || opts.Programs[0].Name != "executor" || opts.Programs[1].Name != "worker" || opts.Install != nil {
		t.Fatalf("Programs = %+v, want executor, worker and no install hook", opts.Programs)
	}
	ex := opts.Programs[0]
	if ex.Build == nil || ex.Probe == nil || ex.HealthWait != time.Minute || ex.WedgeFailures != 3 || ex.StartSecs != time.Second {
		t.Errorf("executor = %+v", ex)
	}
	w := opts.Programs[1]
	want := supervisor.Program{
		Name: "worker", Command: []string{"/bin/worker", "--fast"}, Environment: []string{"A=1", "B=2"},
		Priority: 999, Autostart: true, Autorestart: supervisor.AutorestartUnexpected, ExitCodes: []int{0},
		RestartExitCodes: []int{}, FatalExitCodes: []int{},
		StartSecs: time.Second, StartRetries: 3, StopSignal: syscall.SIGINT, StopWait: 3 * time.Second, DependsOn: []string{},
		Stdout: supervisor.LogFile{Path: "/elsewhere/w.log", MaxBytes: 50 << 20, Backups: 10},
		Stderr: supervisor.LogFile{Path: "/logs/worker.err.log", MaxBytes: 50 << 20, Backups: 10},
	}
	if diff := cmp.Diff(w, want); diff != "" {
		t.Errorf("worker (-got +want):\n%s", diff)
	}
}

// TestInstallOnStartNoRetry: with executor.install_on_start, an install
// error from a bad registry.certs_dir is marked supervisor.ErrNoRetry,
// its message unchanged; a network error is not.
func TestInstallOnStartNoRetry(t *testing.T) {
	path := writeConfig(t, "executor:\n  install_on_start: true\n")
	cfg, _, err := config.Load(config.LoadOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	bad := fmt.Errorf("install: %w", certsdir.Check(filepath.Join(t.TempDir(), "missing"), "ghcr.io"))
	for _, tc := range []struct {
		err     error
		noRetry bool
	}{
		{bad, true},
		{errors.New("install: fetch index: dial tcp: no such host"), false},
	} {
		opts := Supervisor(Supervise{Config: cfg, Install: func(context.Context, func(string)) error { return tc.err }})
		if opts.Install == nil {
			t.Fatal("no install hook with executor.install_on_start")
		}
		got := opts.Install(context.Background(), func(string) {})
		if errors.Is(got, supervisor.ErrNoRetry) != tc.noRetry || got.Error() != tc.err.Error() {
			t.Errorf("Install() = %v (no retry %v), want %v (no retry %v)", got, errors.Is(got, supervisor.ErrNoRetry), tc.err, tc.noRetry)
		}
	}
}

// TestSuperviseOptionsHermes: the default hermes program fits the
// gateway's contract: stopped with SIGINT and 210 s for its drain, told
// it is supervised, its own log followed, restart on 75, FATAL on 78,
// ready once its tree holds gateway.lock and gateway_state.json says
// running within 120 s.
func TestSuperviseOptionsHermes(t *testing.T) {
	cfg, _, err := config.Load(config.LoadOptions{Path: writeConfig(t, "programs:\n  executor:\n    enabled: false\n  hermes:\n    depends_on: []\n")})
	if err != nil {
		t.Fatal(err)
	}
	opts := Supervisor(Supervise{Config: cfg})
	if len(opts.Programs) != 1 || opts.Programs[0].Name != "hermes" {
		t.Fatalf("Programs = %+v, want hermes", opts.Programs)
	}
	h := opts.Programs[0]
	if !cmp.Equal(h.RestartExitCodes, []int{75}) || !cmp.Equal(h.FatalExitCodes, []int{78}) {
		t.Errorf("hermes exit classes = restart %v, fatal %v; want [75], [78]", h.RestartExitCodes, h.FatalExitCodes)
	}
	if h.Probe == nil || h.HealthWait != 120*time.Second || h.WedgeFailures != 0 {
		t.Errorf("hermes readiness: probe %v, wait %s, wedge %d; want a probe, 120s, 0", h.Probe != nil, h.HealthWait, h.WedgeFailures)
	}
	if h.StopSignal != syscall.SIGINT || h.StopWait != 210*time.Second || h.OwnLog != "/workspace/hermes-home/logs/gateway.log" ||
		!slices.Contains(h.Environment, "HERMES_GATEWAY_EXTERNAL_SUPERVISOR=1") || !cmp.Equal(h.Command, []string{"/usr/local/bin/hermes", "gateway", "run", "--replace"}) {
		t.Errorf("hermes = stop %v after %s, own log %q, environment %q, command %q; want SIGINT, 210s, its gateway.log, supervised, --replace",
			h.StopSignal, h.StopWait, h.OwnLog, h.Environment, h.Command)
	}
	want := supervisor.Readiness{
		LockFile: "/workspace/hermes-home/gateway.lock", JSONFile: "/workspace/hermes-home/gateway_state.json",
		JSONField: "gateway_state", JSONValue: "running", MaxAge: 120 * time.Second,
	}
	if diff := cmp.Diff(readiness(cfg.Programs["hermes"]), want); diff != "" {
		t.Errorf("hermes readiness (-got +want):\n%s", diff)
	}
}
