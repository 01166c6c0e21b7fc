package procscan

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
)

// init lets the test binary become a process whose main thread exited
// (testenv.MainThreadExitsEnv), holding the files it inherited.
func init() { testenv.ExitMainThreadIfAsked() }

// mainThreadExited starts the test binary holding files as a process
// whose main thread exited while another thread runs, and returns it
// once it is one, with a channel closed when it has been reaped.
func mainThreadExited(t *testing.T, files ...*os.File) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), testenv.MainThreadExitsEnv+"=1", "GOMAXPROCS=4")
	c.ExtraFiles = files
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { c.Wait(); close(exited) }()
	t.Cleanup(func() { c.Process.Kill(); <-exited })
	if err := testenv.AwaitMainThreadExit(c.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return c, exited
}

// TestHolderWhoseMainThreadExited: a process whose main thread exited
// while another thread runs lists no descriptor in /proc/PID/fd (the
// zombie main thread has no file table); its threads' tables hold the
// file. Openers lists it once, Holds proves it, and Stop signals it
// (it used to find nothing: a leftover of the held-file stop path, and
// a data lock holder named "not visible", lived on).
func TestHolderWhoseMainThreadExited(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "marker"))
	if err != nil {
		t.Fatal(err)
	}
	pin, err := PinFile(f)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Close()
	c, exited := mainThreadExited(t, f)
	f.Close()
	pid := c.Process.Pid
	m, err := Openers(pin)
	if err != nil {
		t.Fatal(err)
	}
	if got := m[pin]; len(got) != 1 || got[0].PID != pid {
		t.Fatalf("Openers() = %v, want pid %d (once) whose main thread exited", got, pid)
	}
	if !Holds(pid, pin) {
		t.Fatalf("Holds(%d) = false, want true", pid)
	}
	stopped, _, err := Stop(context.Background(), pin, syscall.SIGTERM, time.Minute, 0)
	if err != nil || len(stopped) != 1 || stopped[0].PID != pid {
		t.Fatalf("Stop() = %v, %v; want pid %d stopped", stopped, err, pid)
	}
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("process %d, its main thread exited, outlives Stop()", pid)
	}
}

// TestStarted: a process started during the test is dated within it
// (to USER_HZ ticks); a pid that names no process has no start.
func TestStarted(t *testing.T) {
	before := time.Now().Add(-time.Second)
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	if got := Started(c.Process.Pid); got.Before(before) || got.After(time.Now().Add(time.Second)) {
		t.Errorf("Started(%d) = %s, want between %s and now", c.Process.Pid, got, before)
	}
	for _, pid := range []int{-1, 0, 1 << 30} { // above any pid_max
		if got := Started(pid); !got.IsZero() {
			t.Errorf("Started(%d) = %s, want zero", pid, got)
		}
	}
}
