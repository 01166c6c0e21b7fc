package supervisor

import (
	"errors"
	"log/slog"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/procscan"
)

// startGroupLeader starts argv as the leader of a process group of its
// own and returns it; the test's end kills it while it is still this
// process's unreaped child (its pid cannot name another process then).
func startGroupLeader(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd
}

// waitZombie waits until pid has exited and is not reaped yet.
func waitZombie(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, err := procscan.ReadStat(pid); err == nil && st.State == 'Z' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not become a zombie", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSignalGroup: signalGroup reaches a group while any member exists,
// a zombie leader included (the group's id stays reserved until it is
// reaped), and reports a reaped group gone without a kill(-pgid) that
// could reach another group that took the id.
func TestSignalGroup(t *testing.T) {
	r := newReaper(slog.New(slog.DiscardHandler))
	defer signal.Stop(r.sigs)

	live := startGroupLeader(t, "sleep", "60")
	if !r.signalGroup(live.Process.Pid, syscall.SIGTERM) {
		t.Errorf("signalGroup(live group %d) = false, want true", live.Process.Pid)
	}
	err := live.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("the live group's leader ended with %v, want killed by SIGTERM", err)
	}

	done := startGroupLeader(t, "true")
	waitZombie(t, done.Process.Pid)
	if !r.signalGroup(done.Process.Pid, syscall.SIGTERM) {
		t.Errorf("signalGroup(group of a zombie leader) = false, want true (the id is still the group's)")
	}
	if err := done.Wait(); err != nil {
		t.Fatal(err)
	}
	if r.signalGroup(done.Process.Pid, syscall.SIGTERM) {
		t.Errorf("signalGroup(reaped group %d) = true, want false", done.Process.Pid)
	}
	for _, pgid := range []int{0, -1} {
		if r.signalGroup(pgid, syscall.SIGTERM) {
			t.Errorf("signalGroup(%d) = true, want false", pgid)
		}
	}
}

// TestSignalMembersProvesIdentity: a recorded member is signalled only
// while its pid still names the process read (the same start time and
// process group); a stale record of the pid is left alone.
func TestSignalMembersProvesIdentity(t *testing.T) {
	cmd := startGroupLeader(t, "sleep", "60")
	pid := cmd.Process.Pid
	st, err := procscan.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, stale := range []procscan.Stat{
		{PID: pid, PGID: st.PGID, StartTime: st.StartTime + 1},
		{PID: pid, PGID: st.PGID + 1, StartTime: st.StartTime},
	} {
		signalMembers([]procscan.Stat{stale}, syscall.SIGTERM)
	}
	time.Sleep(100 * time.Millisecond)
	if now, err := procscan.ReadStat(pid); err != nil || now.State == 'Z' {
		t.Fatalf("process %d after signals meant for stale records of its pid: %v, state %c; want it untouched", pid, err, now.State)
	}
	signalMembers([]procscan.Stat{st}, syscall.SIGTERM)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("the member ended with %v, want killed by SIGTERM", err)
	}
}

// TestRecordedGroup: which members can be the recorded group's.
func TestRecordedGroup(t *testing.T) {
	const pgid, t0 = 100, 5000
	tests := []struct {
		name    string
		members []procscan.Stat
		want    bool
	}{
		{"leader and a later child", []procscan.Stat{{PID: 100, StartTime: 5000}, {PID: 101, StartTime: 5001}}, true},
		{"children only, leader gone", []procscan.Stat{{PID: 101, StartTime: 5001}}, true},
		{"a member older than the leader", []procscan.Stat{{PID: 99, StartTime: 4999}}, false},
		{"the leader's pid, another start time", []procscan.Stat{{PID: 100, StartTime: 6000}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := recordedGroup(tt.members, pgid, t0); got != tt.want {
				t.Errorf("recordedGroup(%v, %d, %d) = %v, want %v", tt.members, pgid, t0, got, tt.want)
			}
		})
	}
}
