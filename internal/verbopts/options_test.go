package verbopts

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/supervisorclient"
	"github.com/hermesbox/hbx/release"
)

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
	o := Health(cfg, true, nil)
	if o.Release.Change == nil || o.Release.Change() != nil {
		t.Errorf("Health().Release.Change is nil or fails without journals")
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
		Supervisor: supervisorclient.Programs{Socket: "/run/hbx/hbx.sock"}, Programs: []string{"executor", "worker"},
		ExecutorProgram: "executor", PidFile: "/var/lib/hbx/executor/executor.pid",
	}
	if diff := cmp.Diff(o, want, cmp.AllowUnexported(health.Key{})); diff != "" {
		t.Errorf("Health() (-got +want):\n%s", diff)
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

// testImage is a digest-pinned executor.image.
const testImage = "127.0.0.1:5000/hbx/executor:v2@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// writeConfig writes body as a config file in a temp dir and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hbx.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckHealthNames: a check name near a real one gets a "did you
// mean"; real names and far ones (left to health.Run) pass.
func TestCheckHealthNames(t *testing.T) {
	err := CheckHealthNames([]string{"release", "api-helth"})
	if !errors.Is(err, health.ErrUnknownCheck) || err.Error() != `no such check: "api-helth" (did you mean "api-health"?)` {
		t.Errorf("CheckHealthNames(api-helth) = %v, want a did you mean api-health", err)
	}
	if err := CheckHealthNames([]string{"release", "zzzzzzzzz"}); err != nil {
		t.Errorf("CheckHealthNames(release, far) = %v, want nil", err)
	}
}
