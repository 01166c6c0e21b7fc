package main

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/release"
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

func TestHealthChecksFromConfig(t *testing.T) {
	path := writeConfig(t, `executor:
  image: `+testImage+`
  platform: linux/arm64
  platform_digests: {linux/arm64: sha256:`+strings.Repeat("b", 64)+`}
  user: "1000"
health:
  mcp_tools: [a, b]
  token_file: /etc/hbx/mcp.key
programs:
  hermes:
    enabled: false
  worker:
    command: /bin/true
`)
	cfg, _, err := config.Load(config.LoadOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	o := healthChecks(cfg, true, nil)
	if o.Release.Change == nil || o.Release.Change() != nil {
		t.Errorf("healthChecks().Release.Change is nil or fails without journals")
	}
	o.Release.Change = nil
	want := health.Options{
		Listen: "127.0.0.1", Port: 4788, Timeout: cfg.Health.Timeout, KeyFile: "/etc/hbx/mcp.key", Tools: []string{"a", "b"},
		Release: health.ReleaseWant{
			RuntimeDir: "/storage/executor-runtime", Deep: true,
			Target: release.Target{
				Image: cfg.Executor.Image, IndexDigest: digest.Digest("sha256:" + strings.Repeat("a", 64)), Platform: "linux/arm64",
				ManifestDigest: digest.Digest("sha256:" + strings.Repeat("b", 64)),
			},
		},
		DataDir: "/workspace/executor/data", DataDirOwner: "1000",
		Supervisor: supervisorPrograms{socket: "/run/hbx/hbx.sock"}, Programs: []string{"executor", "worker"},
		ExecutorProgram: "executor", PidFile: "/var/lib/hbx/executor/executor.pid",
	}
	if diff := cmp.Diff(o, want, cmp.AllowUnexported(health.Key{}, supervisorPrograms{})); diff != "" {
		t.Errorf("healthChecks() (-got +want):\n%s", diff)
	}
}

func TestHealthTokenStdin(t *testing.T) {
	cfg, _ := healthBox(t)
	c, _, err := config.Load(config.LoadOptions{Path: cfg, PathExplicit: true})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	opts := healthOptions{checks: healthChecks(c, false, nil), only: []string{"mcp-tools"}, stdout: &out}
	if err := runHealth(t.Context(), opts); err != nil || !strings.HasPrefix(out.String(), "skip  mcp-tools") || !strings.Contains(out.String(), "--token-stdin") {
		t.Errorf("runHealth(no key) = %v\n%s; want a skip naming --token-stdin", err, out.String())
	}
	out.Reset()
	opts.checks.Key = health.NewKey("the-key")
	err = runHealth(t.Context(), opts)
	if !errors.Is(err, errHealthFailed) || !strings.Contains(out.String(), "fail  mcp-tools") || strings.Contains(out.String(), "the-key") {
		t.Errorf("runHealth(key, no server) = %v\n%s; want mcp-tools failed without the key shown", err, out.String())
	}
}

// TestExecutorProbeReadiness: the probe judges what health.readiness
// names; api-health sends the key of health.token_file and passes only
// status "ok".
func TestExecutorProbeReadiness(t *testing.T) {
	var degraded atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer the-key" { // the CLI edition: 401 on every path
			w.Header().Set("WWW-Authenticate", `Bearer realm="executor"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if degraded.Load() {
			w.Write([]byte(`{"status":"degraded"}`))
			return
		}
		w.Write([]byte(`{"status":"ok"}`))
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().(*net.TCPAddr)
	self := func() int { return os.Getpid() }
	cfg := config.Defaults()
	cfg.Executor.Listen, cfg.Executor.Port = "127.0.0.1", addr.Port
	if err := executorProbe(&cfg).CheckProcess(t.Context(), self()); !errors.Is(err, health.ErrUnhealthy) || !strings.Contains(err.Error(), "401 Unauthorized") {
		t.Errorf("probe without a key = %v, want 401", err)
	}
	keyFile := filepath.Join(t.TempDir(), "mcp.key")
	if err := os.WriteFile(keyFile, []byte("the-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Health.TokenFile = keyFile
	if err := executorProbe(&cfg).CheckProcess(t.Context(), self()); err != nil {
		t.Errorf("probe with health.token_file = %v, want nil", err)
	}
	degraded.Store(true)
	if err := executorProbe(&cfg).CheckProcess(t.Context(), self()); !errors.Is(err, health.ErrUnhealthy) || !strings.Contains(err.Error(), `status "degraded"`) || strings.Contains(err.Error(), "the-key") {
		t.Errorf("probe of a degraded server = %v, want the status named", err)
	}
	cfg.Health.Readiness = "mcp-auth" // the 401 challenge, whatever /api/health says
	if err := executorProbe(&cfg).CheckProcess(t.Context(), self()); err != nil {
		t.Errorf("probe with readiness mcp-auth = %v, want nil", err)
	}
	// A key file that cannot be read: no key is sent, and a failure says
	// why; a payload that needs no key passes (TestExecutorProbe).
	cfg.Health.Readiness, cfg.Health.TokenFile = "api-health", filepath.Join(t.TempDir(), "gone.key")
	if err := executorProbe(&cfg).CheckProcess(t.Context(), self()); !errors.Is(err, health.ErrUnhealthy) || !strings.Contains(err.Error(), "401 Unauthorized (no key sent:") || !strings.Contains(err.Error(), "gone.key") {
		t.Errorf("probe with a missing key file = %v, want 401 saying no key was sent and why", err)
	}
}
