package supervisor

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/progcgroup"
)

// TestLockHeldByCgroupMember: where a program has a cgroup, ready_lock
// counts a lock held by any member of it, also one in a session of its
// own that is no descendant of the leader (started beside it, as a
// reparented helper is); the same holder outside the cgroup is not the
// program's.
func TestLockHeldByCgroupMember(t *testing.T) {
	rel, _, mount := testCgroup(t)
	id := make([]byte, 6)
	if _, err := rand.Read(id); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(mount+rel, progcgroup.Subtree(hex.EncodeToString(id)), "prog")
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	cg, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	start := func(sys *syscall.SysProcAttr, argv ...string) *exec.Cmd {
		t.Helper()
		c := exec.Command(argv[0], argv[1:]...)
		c.SysProcAttr = sys
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // the group only while its leader is unreaped: then its id is still its own
			if c.ProcessState == nil {
				syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
				c.Wait()
			}
		})
		return c
	}
	lockFile := filepath.Join(t.TempDir(), "gateway.lock")
	if err := os.WriteFile(lockFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		inGroup bool
		want    string
	}{
		{"member in its own session", true, ""},
		{"outside the cgroup", false, "not by the program"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader := start(&syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: int(cg.Fd())}, "sleep", "1000")
			sys := &syscall.SysProcAttr{Setsid: true}
			if tc.inGroup {
				sys.UseCgroupFD, sys.CgroupFD = true, int(cg.Fd())
			}
			holder := start(sys, "flock", "-x", lockFile, "sleep", "1000")
			var err error
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if err = checkLockHeld(lockFile, leader.Process.Pid); err == nil || !strings.Contains(err.Error(), "is not held") {
					break
				}
			}
			if (tc.want == "" && err != nil) || (tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want))) {
				t.Errorf("checkLockHeld(lock held by %d, leader %d) = %v, want %q", holder.Process.Pid, leader.Process.Pid, err, tc.want)
			}
			// flock's own child sleeps in the holder's session: kill both.
			syscall.Kill(-holder.Process.Pid, syscall.SIGKILL)
			holder.Wait()
			syscall.Kill(-leader.Process.Pid, syscall.SIGKILL)
			leader.Wait()
		})
	}
	// testCgroup's cleanup, the last to run, removes the program cgroup
	// with the test cgroup.
}
