package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// socketDir is a short directory for a control socket (sun_path is short).
func socketDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "hbx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestHoldRestarts: a hold's results say which programs its release starts
// again (those it found running), so a caller needs no Status call to
// guess it; a program left STOPPED (autostart false) is stopped but not
// restarted.
func TestHoldRestarts(t *testing.T) {
	sock := filepath.Join(socketDir(t), "hbx.sock")
	ctx := context.Background()
	a := helperProgram(t, progDir(t, "a"), "a", "sleep", "")
	b := helperProgram(t, progDir(t, "b"), "b", "sleep", "")
	b.Autostart = false
	s := runSupervisor(t, Options{Programs: []Program{a, b}, Socket: sock})
	waitState(t, s, "a", 30*time.Second, Running)
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Hold(ctx, "all")
	if err != nil {
		t.Fatalf("Hold(all) = %v", err)
	}
	defer h.Release()
	if got := h.Restarts(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("Hold(all).Restarts() = %q, want [a] (b was STOPPED)", got)
	}
	if len(h.Results) != 2 || h.Results[1].Restart {
		t.Errorf("Hold(all).Results = %+v, want b with Restart false", h.Results)
	}
}

// TestWaitRunning: WaitRunning over the socket returns once every named
// program is RUNNING at once, fails at once with ErrFatal for a FATAL one,
// refuses unknown names and ends with ctx saying what it waited for.
func TestWaitRunning(t *testing.T) {
	sock := filepath.Join(socketDir(t), "hbx.sock")
	ctx := context.Background()
	a := helperProgram(t, progDir(t, "a"), "a", "sleep", "")
	a.StartSecs = 300 * time.Millisecond
	f := helperProgram(t, progDir(t, "f"), "f", "exit", "3")
	// It exits at once, which a loaded machine may stretch past a short
	// startsecs: with a minute it can only fail its starts.
	f.StartSecs, f.StartRetries = time.Minute, 1
	idle := helperProgram(t, progDir(t, "idle"), "idle", "sleep", "")
	idle.Autostart = false
	s := runSupervisor(t, Options{Programs: []Program{a, f, idle}, Socket: sock})
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sts, err := c.WaitRunning(wctx, "a")
	if err != nil || len(sts) != 1 || sts[0].State != Running || sts[0].PID == 0 {
		t.Errorf("WaitRunning(a) = %+v, %v; want a RUNNING with a pid", sts, err)
	}
	if _, err := c.WaitRunning(wctx, "a", "f"); !errors.Is(err, ErrFatal) || !strings.Contains(err.Error(), "f") {
		t.Errorf("WaitRunning(a, f) = %v, want ErrFatal naming f", err)
	}
	if _, err := c.WaitRunning(wctx, "nope"); !errors.Is(err, ErrUnknownProgram) {
		t.Errorf("WaitRunning(nope) = %v, want ErrUnknownProgram", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if _, err := s.WaitRunning(short, "idle"); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "idle is STOPPED") {
		t.Errorf("WaitRunning(idle) = %v, want the deadline naming idle is STOPPED", err)
	}
}

// TestProcessProbePID: a ProcessProbe is told the pid of the process it
// checks, the one Status reports, at every probe (start gate and wedge
// checks), with nothing set after the supervisor is built.
func TestProcessProbePID(t *testing.T) {
	a := helperProgram(t, progDir(t, "a"), "a", "sleep", "")
	var seen atomic.Int64
	var zero atomic.Bool
	a.Probe = ProcessProbeFunc(func(_ context.Context, pid int) error {
		if pid == 0 {
			zero.Store(true)
		}
		seen.Store(int64(pid))
		return nil
	})
	a.HealthInterval, a.WedgeFailures = 10*time.Millisecond, 3
	s := runSupervisor(t, Options{Programs: []Program{a}})
	st := waitState(t, s, "a", 30*time.Second, Running)
	deadline := time.Now().Add(10 * time.Second)
	for seen.Load() != int64(st.PID) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := seen.Load(); got != int64(st.PID) || zero.Load() {
		t.Errorf("probe saw pid %d (a zero pid: %v), want %d, the pid of a", got, zero.Load(), st.PID)
	}
}
