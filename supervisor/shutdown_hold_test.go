package supervisor

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/procscan"
)

// TestHoldAndWaitDuringShutdownAreRefused: while the supervisor shuts
// down, a hold (hbx backup's, restore's, upgrade's) and a wait for
// RUNNING are refused with ErrShuttingDown, in the process and over the
// socket (503; the client's error is ErrShuttingDown again, one line
// saying to try again once it has stopped). Before, a hold during
// shutdown was granted and ended with the supervisor's exit, a hold
// that had waited for the install was a 500 "internal" error on the
// socket, and a wait lasted until its caller gave up.
func TestHoldAndWaitDuringShutdownAreRefused(t *testing.T) {
	app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
	app.Priority = 2
	// blocker ignores its stop signal for a minute: the shutdown lasts
	// until the test kills it.
	blocker := helperProgram(t, progDir(t, "blocker"), "blocker", "sleep", "")
	blocker.Priority = 1
	blocker.StopSignal = syscall.SIGWINCH
	blocker.StopWait = time.Minute
	sock := filepath.Join(socketDir(t), "hbx.sock")
	s := runSupervisor(t, Options{Programs: []Program{app, blocker}, Socket: sock})
	bst := waitState(t, s, "blocker", 30*time.Second, Running)
	waitState(t, s, "app", 30*time.Second, Running)
	// By its identity: the supervisor reaps it, and its bare pid may name
	// another process by the time the test ends.
	blockerProc, err := procscan.ReadStat(bst.PID)
	if err != nil {
		t.Fatal(err)
	}
	var unblocked atomic.Bool
	unblock := func() {
		if unblocked.CompareAndSwap(false, true) {
			blockerProc.Signal(syscall.SIGKILL)
		}
	}
	t.Cleanup(unblock)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}

	s.Shutdown()
	waitState(t, s, "blocker", 30*time.Second, Stopping)

	const want = "supervisor is shutting down: try again once it has stopped"
	check := func(what string, err error, want string) {
		t.Helper()
		if !errors.Is(err, ErrShuttingDown) || err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s during shutdown = %v; want one line saying %q, ErrShuttingDown", what, err, want)
		}
	}
	h, err := c.Hold(ctx, "all")
	if h != nil {
		h.Release()
	}
	check("client Hold(all)", err, "hold blocker, app: "+want)
	_, release, err := s.Hold(ctx, "app")
	if release != nil {
		release()
	}
	check("Hold(app)", err, "hold app: "+want)
	_, err = c.WaitRunning(ctx, "app")
	check("client WaitRunning(app)", err, "wait for app to be RUNNING: supervisor is shutting down (app is STOPPED)")
	if st := s.Get("app"); st.Held {
		t.Errorf("app = %+v after holds refused during shutdown, want not held", st)
	}

	unblock()
	select {
	case <-s.stopped:
	case <-ctx.Done():
		t.Fatal("shutdown did not finish after blocker was killed")
	}
}
