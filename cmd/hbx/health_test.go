package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/verbopts"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/supervisor"
)

// healthBox writes a config whose directories are in a temp dir: the data
// directory exists (0700), no release is installed, no supervisor runs.
func healthBox(t *testing.T) (cfgPath, dataDir string) {
	t.Helper()
	dir := t.TempDir()
	dataDir = filepath.Join(dir, "data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfgPath = writeConfig(t, `executor:
  runtime_dir: `+filepath.Join(dir, "runtime")+`
  data_dir: `+dataDir+`
  state_dir: `+filepath.Join(dir, "state")+`
  port: 1
supervisor:
  socket: `+filepath.Join(dir, "hbx.sock")+`
health:
  timeout: 1s
`)
	return cfgPath, dataDir
}

func TestHealthCommand(t *testing.T) {
	cfg, dataDir := healthBox(t)

	out, _, code, err := runTest(t, nil, "health", "--config", cfg, "--only", "data-dir,supervisor")
	if code != 0 || err != nil {
		t.Fatalf("hbx health --only data-dir,supervisor = %d, %v\n%s", code, err, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 ||
		!regexp.MustCompile(`^skip  supervisor\s+\d+ms  no supervisor is running \(nothing listens on .*hbx\.sock\)$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^pass  data-dir\s+\d+ms  .*/data: a directory of mode 0700 owned by `).MatchString(lines[1]) {
		t.Errorf("hbx health output:\n%s", out)
	}

	if err := os.Chmod(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, _, code, err = runTest(t, nil, "health", "--config", cfg, "--json", "--only", "release", "--only", "data-dir")
	if code != 1 || err == nil || err.Error() != "health: failed: release, data-dir" {
		t.Errorf("hbx health with a bad data dir = %d, %v; want 1, health: failed: release, data-dir", code, err)
	}
	var rep struct {
		Status string `json:"status"`
		Checks []struct {
			Name       string `json:"name"`
			Status     string `json:"status"`
			Reason     string `json:"reason"`
			DurationMS *int64 `json:"duration_ms"`
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("hbx health --json printed %q: %v", out, err)
	}
	if rep.Status != "fail" || len(rep.Checks) != 2 || rep.Checks[0].Name != "release" || rep.Checks[1].Name != "data-dir" ||
		!strings.Contains(rep.Checks[0].Reason, "no active release") || !strings.Contains(rep.Checks[1].Reason, "is mode 0755, want 0700 or stricter") ||
		rep.Checks[1].DurationMS == nil {
		t.Errorf("hbx health --json = %s", out)
	}

	for _, args := range [][]string{
		{"--only", "bogus"},
		{"--wait", "-1s"},
		{"--wait-start", "-1s"},
		{"--wait", "1s", "--wait-start", "1s"},
		{"extra"},
	} {
		_, _, code, err := runTest(t, nil, append([]string{"health", "--config", cfg}, args...)...)
		if code != 2 {
			t.Errorf("hbx health %q = %d, %v; want 2", args, code, err)
		}
	}
	// A check name near a real one gets a "did you mean", like commands
	// and programs.
	if _, _, code, err := runTest(t, nil, "health", "--config", cfg, "--only", "api-helth"); code != 2 || err == nil ||
		err.Error() != `--only: no such check: "api-helth" (did you mean "api-health"?)` {
		t.Errorf("hbx health --only api-helth = %d, %v; want 2 with a did you mean", code, err)
	}
}

func TestHealthTokenStdin(t *testing.T) {
	cfg, _ := healthBox(t)
	c, _, err := config.Load(config.LoadOptions{Path: cfg, PathExplicit: true})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	opts := healthOptions{checks: verbopts.Health(c, false, nil), only: []string{"mcp-tools"}, stdout: &out}
	if err := runHealth(t.Context(), opts); err != nil || !strings.HasPrefix(out.String(), "skip  mcp-tools") || !strings.Contains(out.String(), "--token-stdin") {
		t.Errorf("runHealth(no key) = %v\n%s; want a skip naming --token-stdin", err, out.String())
	}
	out.Reset()
	opts.checks.Key = health.NewKey("the-key")
	err = runHealth(t.Context(), opts)
	if !errors.Is(err, health.ErrFailed) || !strings.Contains(out.String(), "fail  mcp-tools") || strings.Contains(out.String(), "the-key") {
		t.Errorf("runHealth(key, no server) = %v\n%s; want mcp-tools failed without the key shown", err, out.String())
	}
}

// TestHealthWaitStopsOnFatal: against a real supervisor whose program
// failed for good (FATAL: only hbx start mends it), hbx health --wait
// stops at once, as --wait-start does, instead of waiting out its
// duration, and its error says which program is FATAL and why.
func TestHealthWaitStopsOnFatal(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeConfig(t, "executor:\n  data_dir: "+filepath.Join(dir, "data")+"\n  runtime_dir: "+filepath.Join(dir, "runtime")+
		"\nsupervisor:\n  socket: "+filepath.Join(dir, "hbx.sock")+"\n  log_dir: "+filepath.Join(dir, "logs")+
		"\nprograms:\n  executor:\n    enabled: false\n  hermes:\n    enabled: false\n  broken:\n    command: /bin/false\n    startretries: 0\n")
	cfg, _, err := config.Load(config.LoadOptions{Path: cfgPath, PathExplicit: true})
	if err != nil {
		t.Fatal(err)
	}
	opts := verbopts.Supervisor(verbopts.Supervise{Config: cfg, Log: slog.New(slog.DiscardHandler)})
	opts.StateDir = filepath.Join(dir, "state")
	s, err := supervisor.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	// Poll until the supervisor reports the program FATAL.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("broken never became FATAL")
		}
		if c, err := supervisor.Dial(ctx, cfg.Supervisor.Socket); err == nil {
			sts, err := c.Status(ctx)
			if err == nil && len(sts) == 1 && sts[0].State == supervisor.Fatal {
				break
			}
		}
	}
	for _, flag := range []string{"--wait", "--wait-start"} {
		start := time.Now()
		out, _, code, err := runTest(t, nil, "health", "--config", cfgPath, "--only", "supervisor", flag, "3m")
		if took := time.Since(start); code != 1 || !errors.Is(err, health.ErrFatal) || !strings.Contains(err.Error(), "; broken FATAL (") || took > 90*time.Second {
			t.Errorf("hbx health %s 3m with broken FATAL = exit %d, %v after %v\n%s\nwant 1 at once, the error naming broken FATAL and why", flag, code, err, took.Round(time.Millisecond), out)
		}
		t.Logf("%s: %v", flag, err)
	}
}
