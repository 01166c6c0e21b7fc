package supervisor

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/procscan"
)

// TestStartDecidedBeforeShutdownIsRefused pins the race fixed in d79a394:
// a hold's release decides to start a program while the supervisor is not
// yet shutting down, but its start request reaches the program's loop only
// after shutdown began and the program was stopped. The loop must answer it
// with ErrShuttingDown and fork nothing.
//
// The interleaving is made deterministic with the supervisor's own state:
//
//   - "late" (priority 2) is the program the late start is for. Its Build
//     hook counts every command preparation, which spawn does in the loop
//     right before the fork, so a fork is seen synchronously.
//   - "blocker" (priority 1) has a stop signal it ignores (SIGWINCH, ignored
//     by default, so there is no window before the child installs a
//     handler) and a stopwaitsecs of a minute. Shutdown stops the highest
//     priority number first, so it stops "late" and then sits in STOPPING
//     on "blocker" until the test kills blocker's group: while it does,
//     shutdown has begun (s.shutting is set before any stop) and "late"
//     has already been stopped, and Run cannot return.
//   - The late request is the one release would have sent, delivered with
//     the same call (s.request on s.ctx). s.request returns once the loop's
//     handle has returned (accepted is closed by handle), so the state,
//     the Build count and the outcome are checked after the handler ran,
//     with no sleep.
func TestStartDecidedBeforeShutdownIsRefused(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	lateDir := progDir(t, "late")
	var builds atomic.Int32
	late := helperProgram(t, lateDir, "late", "sleep", "")
	late.Priority = 2
	late.Build = func(context.Context) (*Command, error) {
		builds.Add(1)
		return &Command{
			Path: exe,
			Args: []string{exe, "-test.run=^$"},
			Env:  append(os.Environ(), "HBXTEST_HELPER=sleep", "HBXTEST_DIR="+lateDir),
		}, nil
	}
	blocker := helperProgram(t, progDir(t, "blocker"), "blocker", "sleep", "")
	blocker.Priority = 1
	blocker.StopSignal = syscall.SIGWINCH
	blocker.StopWait = time.Minute
	s := runSupervisor(t, Options{Programs: []Program{late, blocker}})

	waitState(t, s, "late", 30*time.Second, Running)
	bst := waitState(t, s, "blocker", 30*time.Second, Running)
	// Let shutdown finish however the test ends (runs before
	// runSupervisor's cleanup waits for Run).
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
	if n := builds.Load(); n != 1 {
		t.Fatalf("late was built %d times before the hold, want 1", n)
	}

	// A hold stops "late"; its release will decide to start it again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, release, err := s.Hold(ctx, "late")
	if err != nil || len(res) != 1 || res[0].State != Stopped {
		t.Fatalf("Hold(late) = %+v, %v; want late STOPPED", res, err)
	}
	// Release decides under s.mu, before shutdown begins, that late is to
	// start again: the hold found it RUNNING and nothing is shutting down.
	s.mu.Lock()
	decided := s.held["late"] == 1 && !s.shutting
	s.mu.Unlock()
	if !decided {
		t.Fatal("release would not start late before shutdown")
	}

	// Shutdown begins: "late" is stopped (already was), then it waits on
	// "blocker", which ignores its stop signal.
	s.Shutdown()
	waitState(t, s, "blocker", 30*time.Second, Stopping)
	s.mu.Lock()
	shutting := s.shutting
	s.mu.Unlock()
	if !shutting {
		t.Fatal("blocker is STOPPING but the supervisor is not shutting down")
	}

	// The decided start reaches late's handler now.
	done := s.request(s.ctx, reqStart, []string{"late"})["late"]
	if done == nil {
		t.Fatal("the start request was not delivered to late's loop")
	}
	st := s.Get("late")
	select {
	case err := <-done:
		if !errors.Is(err, ErrShuttingDown) {
			t.Errorf("late start during shutdown answered %v, want ErrShuttingDown", err)
		}
	default:
		t.Errorf("late start during shutdown was not answered by the handler (late is %s, pid %d)", st.State, st.PID)
	}
	if n := builds.Load(); n != 1 {
		t.Errorf("late was built %d times, want 1: the start during shutdown prepared a new process", n)
	}
	if st.State != Stopped || st.PID != 0 {
		t.Errorf("late = %s pid %d (%s) after the start during shutdown, want STOPPED without a process", st.State, st.PID, st.Detail)
	}
	if bs := s.Get("blocker"); bs.State != Stopping {
		t.Errorf("blocker = %s, want still STOPPING (shutdown in progress)", bs.State)
	}
	// The real release, called now, starts nothing either.
	release()

	// Let shutdown finish and wait for it.
	unblock()
	select {
	case <-s.stopped:
	case <-ctx.Done():
		t.Fatal("shutdown did not finish after blocker was killed")
	}
	if n := builds.Load(); n != 1 {
		t.Errorf("late was built %d times by the end of shutdown, want 1", n)
	}
	if n := len(starts(t, lateDir)); n > 1 {
		t.Errorf("late's process started %d times, want once (before the hold)", n)
	}
}
