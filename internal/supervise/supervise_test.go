package supervise

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/verbopts"

	"github.com/hermesbox/hbx/internal/adapters"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/supervisor"
)

// TestSuperviseRecoverRefusalReleasesClaim: when the restore recovery
// refuses the start (data awaiting its runtime), Supervise lets go of the
// supervisor's locks it claimed (state directory and socket) before it
// returns, as a refused Run does: a held start (--hold-on-error) keeps
// none, so the hbx supervise started once the runtime is installed is
// not refused as "already running".
func TestSuperviseRecoverRefusalReleasesClaim(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, "supervisor:\n  socket: "+filepath.Join(dir, "hbx.sock")+"\n  log_dir: "+filepath.Join(dir, "logs")+"\nprograms:\n  executor:\n    enabled: false\n  hermes:\n    enabled: false\n  worker:\n    command: /bin/true\n")
	cfg, _, err := config.Load(config.LoadOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	refused := errors.New("the restored data awaits its runtime")
	b := adapters.Box{Config: cfg, Log: slog.New(slog.DiscardHandler)}
	ran, err := Supervise(context.Background(), b, Run{StateDir: state,
		LockData:       func(context.Context) (*datalock.Lock, error) { return nil, errors.New("no data lock without executor") },
		RecoverRestore: func(context.Context) error { return refused }})
	if ran || !errors.Is(err, refused) {
		t.Fatalf("Supervise() = %v, %v; want false and the recovery's refusal", ran, err)
	}
	opts := verbopts.Supervisor(verbopts.Supervise{Config: cfg, Log: b.Log})
	opts.StateDir = state
	s, err := supervisor.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Claim(); err != nil {
		t.Errorf("Claim() after the refused start = %v, want nil (the refused start let its locks go)", err)
	}
}

// TestInstallOnStartOfflineHint: the install on start of a box whose
// registry refuses connections ends with hbx install's offline hint, as a
// plain hbx install does.
func TestInstallOnStartOfflineHint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	image := strings.Replace(testImage, "127.0.0.1:5000", closed, 1)
	path := writeConfig(t, "executor:\n  image: \""+image+"\"\n  install_on_start: true\n  runtime_dir: "+filepath.Join(dir, "runtime")+"\n  data_dir: "+filepath.Join(dir, "data")+
		"\n  state_dir: "+filepath.Join(dir, "state")+"\nsupervisor:\n  socket: "+filepath.Join(dir, "s.sock")+"\nregistry:\n  insecure_hosts: [\""+closed+"\"]\n")
	cfg, _, err := config.Load(config.LoadOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	b := adapters.Box{Config: cfg, Log: slog.New(slog.DiscardHandler)}
	const hint = "; offline: hbx install --from FILE (see docs/install.md#offline-install)"
	if err := InstallOnStart(b)(context.Background(), func(string) {}); err == nil || !strings.HasSuffix(err.Error(), hint) {
		t.Errorf("InstallOnStart(registry refusing connections) = %v, want an error ending %q", err, hint)
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
