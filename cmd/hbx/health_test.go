package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/verbopts"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/internal/config"
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
