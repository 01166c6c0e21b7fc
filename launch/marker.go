package launch

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/hermesbox/hbx/internal/procscan"
)

// marker is the read end of a pipe that every process of a command
// inherits (after its other ExtraFiles), so that one that left the
// command's process group (setsid, a daemon) is still found and killed
// when the command is done. A process that left the group and closed
// every descriptor it inherited is not found.
type marker struct {
	r, w *os.File
	pin  *procscan.Pin
}

func newMarker() (*marker, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("make marker: %w", err)
	}
	pin, err := procscan.PinFile(r)
	if err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("make marker: %w", err)
	}
	return &marker{r: r, w: w, pin: pin}, nil
}

// started drops this process's copy of the read end once the command has
// started (or failed to).
func (m *marker) started() { m.r.Close() }

// kill SIGKILLs every other process that still holds the marker, waiting
// up to 10s (even past ctx's end) for them to go, and releases the pipe.
func (m *marker) kill(ctx context.Context) error {
	defer m.w.Close()
	defer m.pin.Close()
	m.r.Close()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, _, err := procscan.Stop(sctx, m.pin, syscall.SIGKILL, 0, 0)
	return err
}
