package procscan

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestSignal: the signal goes only where the proof holds, and never to a
// process that died (and whose pid another process may have taken) after
// the pidfd was opened, even when the proof, read of /proc/PID, passes.
func TestSignal(t *testing.T) {
	start := func(t *testing.T) *exec.Cmd {
		t.Helper()
		c := exec.Command("sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	ended := func(c *exec.Cmd) string {
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case err := <-done:
			if err == nil {
				return "exit 0"
			}
			return err.Error()
		case <-time.After(200 * time.Millisecond):
			return ""
		}
	}
	t.Run("proof holds", func(t *testing.T) {
		c := start(t)
		if !Signal(c.Process.Pid, syscall.SIGTERM, func(int) bool { return true }) {
			t.Fatal("Signal() = false, want true")
		}
		if got := ended(c); got != "signal: terminated" {
			t.Errorf("after Signal: %q, want signal: terminated", got)
		}
	})
	t.Run("proof fails", func(t *testing.T) {
		c := start(t)
		if Signal(c.Process.Pid, syscall.SIGTERM, func(int) bool { return false }) {
			t.Fatal("Signal() = true, want false")
		}
		if got := ended(c); got != "" {
			t.Errorf("a process whose proof failed ended: %q", got)
		}
	})
	t.Run("died after the pidfd", func(t *testing.T) {
		c := start(t)
		other := start(t)
		pid := c.Process.Pid
		sent := Signal(pid, syscall.SIGTERM, func(int) bool {
			// The pinned process dies and is reaped here: its pid is
			// free for reuse, and the signal must go nowhere.
			c.Process.Kill()
			c.Wait()
			return true
		})
		if sent {
			t.Errorf("Signal() = true for a process reaped before the signal, want false")
		}
		if got := ended(other); got != "" {
			t.Errorf("an unrelated process ended: %q", got)
		}
	})
	t.Run("gone before", func(t *testing.T) {
		c := start(t)
		pid := c.Process.Pid
		c.Process.Kill()
		c.Wait()
		// The pid may already belong to another process on a busy
		// machine: the proof refuses, so nothing can be sent to it.
		if Signal(pid, syscall.SIGTERM, func(int) bool { return false }) {
			t.Errorf("Signal() of a reaped pid = true, want false")
		}
	})
}

// TestStatSignal: a Stat signals its process while its pid names it, and
// a Stat of another start time (a pid reused since) signals nothing.
func TestStatSignal(t *testing.T) {
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	st, err := ReadStat(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	stale := st
	stale.StartTime--
	if stale.Signal(syscall.SIGTERM) {
		t.Errorf("Stat{start time %d}.Signal() on pid %d started at %d = true, want false", stale.StartTime, st.PID, st.StartTime)
	}
	if now, err := ReadStat(st.PID); err != nil || now.State == 'Z' {
		t.Fatalf("the process after a stale Stat's signal: %v, state %c; want it untouched", err, now.State)
	}
	if !st.Signal(syscall.SIGTERM) {
		t.Errorf("Stat.Signal() of the live process = false, want true")
	}
	if err := c.Wait(); err == nil || err.Error() != "signal: terminated" {
		t.Errorf("the process ended with %v, want signal: terminated", err)
	}
	if st.Signal(syscall.SIGTERM) {
		t.Errorf("Stat.Signal() of the reaped process = true, want false")
	}
}
