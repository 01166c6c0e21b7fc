package launch

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/procscan"
)

// TestGroupKilledBeforeLeaderReaped: when the payload's process (its
// group's leader) exits leaving a process in its group that holds its
// output, that process is killed before the leader is reaped. After the
// reaping the group's id is free, and a kill(-id) sent then (as Run and
// Smoke did, once the output wait of up to 3 s was over) could reach an
// unrelated group that took it on a busy machine. Run and Smoke both.
func TestGroupKilledBeforeLeaderReaped(t *testing.T) {
	for _, via := range []string{"Run", "Smoke"} {
		t.Run(via, func(t *testing.T) {
			dir := t.TempDir()
			script := "echo $$ > leader; sleep 1000 & echo $! > member; while ! test -e go; do sleep 0.01; done; exit 0"
			spec := &Spec{Path: "/bin/sh", Args: []string{"sh", "-c", script}, Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}, PidFile: filepath.Join(dir, "pid")}
			done := make(chan error, 1)
			go func() {
				if via == "Run" {
					done <- Run(context.Background(), spec, io.Discard, io.Discard, slog.New(slog.DiscardHandler))
				} else {
					done <- Smoke(context.Background(), spec, time.Minute)
				}
			}()
			leader, member := readPidFile(t, filepath.Join(dir, "leader")), readPidFile(t, filepath.Join(dir, "member"))
			lst, lerr := procscan.ReadStat(leader)
			mst, merr := procscan.ReadStat(member)
			if lerr != nil || merr != nil {
				t.Fatalf("read the leader's and the member's stat: %v, %v", lerr, merr)
			}
			t.Cleanup(func() { mst.Signal(syscall.SIGKILL) }) // not this process's child: by its identity, never its bare pid
			if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
				if st, err := procscan.ReadStat(leader); err != nil || st.StartTime != lst.StartTime {
					break // reaped
				}
				if time.Now().After(deadline) {
					t.Fatal("the leader was not reaped within a minute of its exit")
				}
			}
			if st, err := procscan.ReadStat(member); err == nil && st.StartTime == mst.StartTime && st.State != 'Z' && !sigkillPending(member) {
				t.Errorf("the leader was reaped while %d of its group lived on with no SIGKILL sent", member)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s() = %v, want nil", via, err)
				}
			case <-time.After(time.Minute):
				t.Fatalf("%s() did not return", via)
			}
		})
	}
}

// readPidFile waits for the shell to write a pid to p and returns it.
func readPidFile(t *testing.T, p string) int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(p)
		if s := string(b); strings.HasSuffix(s, "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				t.Fatalf("%s: %q", p, b)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s within a minute", p)
		}
	}
}

// sigkillPending reports whether pid has SIGKILL pending (sent, not yet
// acted on: kill(2) returns before its target has exited).
func sigkillPending(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return true // gone
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&(1<<(9-1)) != 0 {
			return true
		}
	}
	return false
}

// TestRunKillAfter: with Spec.KillAfter set, a payload that ignores the
// SIGTERM Run sends when its context ends gets SIGKILL that long after,
// and Run returns its status (128+9); the rehearsal's stop relies on it.
func TestRunKillAfter(t *testing.T) {
	dir := t.TempDir()
	script := "trap '' TERM; echo $$ > leader; while :; do sleep 0.05; done"
	spec := &Spec{Path: "/bin/sh", Args: []string{"sh", "-c", script}, Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}, PidFile: filepath.Join(dir, "pid"), KillAfter: 200 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, spec, io.Discard, io.Discard, slog.New(slog.DiscardHandler)) }()
	readPidFile(t, filepath.Join(dir, "leader"))
	cancel()
	select {
	case err := <-done:
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != 128+int(syscall.SIGKILL) {
			t.Errorf("Run() = %v, want exit status %d (SIGKILL)", err, 128+int(syscall.SIGKILL))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run() still waits 30 s after its context ended for a payload that ignores SIGTERM, KillAfter 200ms")
	}
}

// TestGroupWaitLeaderReapedElsewhere: when something else in this process
// reaped the leader first, wait returns cmd.Wait's error and the group is
// not signalled after (its id may be another group's by then): signal
// reports false.
func TestGroupWaitLeaderReapedElsewhere(t *testing.T) {
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(cmd.Process.Pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	g := &group{pid: cmd.Process.Pid}
	if err := g.wait(cmd); err == nil {
		t.Errorf("wait() of a leader reaped elsewhere = nil, want cmd.Wait's error")
	}
	if g.signal(syscall.SIGTERM) {
		t.Errorf("signal() after wait = true, want false (the leader is reaped)")
	}
}
