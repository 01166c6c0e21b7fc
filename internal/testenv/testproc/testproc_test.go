// SPDX-License-Identifier: Apache-2.0

package testproc

import (
	"os/exec"
	"testing"

	"github.com/hermesbox/hbx/internal/procscan"
)

// TestKillAtEnd: the process named is killed when the (sub)test ends,
// and a pid that names no process is ignored.
func TestKillAtEnd(t *testing.T) {
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	var st procscan.Stat
	t.Run("named", func(t *testing.T) { st = KillAtEnd(t, c.Process.Pid) })
	if st.PID != c.Process.Pid || st.StartTime == 0 {
		t.Errorf("KillAtEnd(%d) = %+v, want the process's Stat", c.Process.Pid, st)
	}
	if err := c.Wait(); err == nil || err.Error() != "signal: killed" {
		t.Errorf("the process after its test ended: %v, want signal: killed", err)
	}
	t.Run("gone", func(t *testing.T) {
		if got := KillAtEnd(t, c.Process.Pid); got != (procscan.Stat{}) {
			t.Errorf("KillAtEnd(reaped pid %d) = %+v, want the zero Stat", c.Process.Pid, got)
		}
	})
}

// TestKillMarkedAtEnd: a process whose environment holds the mark is
// killed when the test ends; one without it is left alone.
func TestKillMarkedAtEnd(t *testing.T) {
	start := func(env ...string) *exec.Cmd {
		c := exec.Command("sleep", "60")
		c.Env = env
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	marked, other := start("A=1", "HBXTEST_MARK=x"), start("HBXTEST_MARK=xy")
	if !HasEnv(marked.Process.Pid, "HBXTEST_MARK=x") || !HasEnv(marked.Process.Pid, "A=1") || HasEnv(other.Process.Pid, "HBXTEST_MARK=x") {
		t.Fatalf("HasEnv: the marked process %d is not found marked, or the other %d is", marked.Process.Pid, other.Process.Pid)
	}
	t.Run("marked", func(t *testing.T) {
		KillMarkedAtEnd(t, marked.Process.Pid, "HBXTEST_MARK=x")
		KillMarkedAtEnd(t, other.Process.Pid, "HBXTEST_MARK=x")
	})
	if err := marked.Wait(); err == nil || err.Error() != "signal: killed" {
		t.Errorf("the marked process after its test ended: %v, want signal: killed", err)
	}
	if st, err := procscan.ReadStat(other.Process.Pid); err != nil || st.State == 'Z' {
		t.Errorf("the unmarked process after the test ended: %v, state %c; want it running", err, st.State)
	}
}
