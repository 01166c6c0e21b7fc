package supervisorclient

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/supervisor"
)

// TestNoSupervisor: with nothing listening on the socket and no held
// file, Dial's error wraps supervisor.ErrNotRunning, and health's view of
// it wraps health.ErrNoSupervisor naming the socket.
func TestNoSupervisor(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "hbx.sock")
	cfg := config.Defaults()
	cfg.Supervisor.Socket = sock
	if _, err := Dial(t.Context(), &cfg); !errors.Is(err, supervisor.ErrNotRunning) || errors.Is(err, supervisor.ErrHolding) {
		t.Errorf("Dial = %v, want supervisor.ErrNotRunning (not held)", err)
	}
	_, err := Programs{Socket: sock}.Programs(t.Context())
	if !errors.Is(err, health.ErrNoSupervisor) || !strings.Contains(err.Error(), sock) {
		t.Errorf("Programs = %v, want health.ErrNoSupervisor naming %s", err, sock)
	}
}
