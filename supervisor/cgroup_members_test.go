package supervisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
)

// init lets the test binary become a process whose main thread exited
// (testenv.MainThreadExitsEnv).
func init() { testenv.ExitMainThreadIfAsked() }

// TestCgroupMemberWhoseMainThreadExited: a program's process whose main
// thread exited while another thread runs reads as a zombie in
// /proc/PID/stat, yet it runs and keeps the cgroup busy. It is a member
// (so a restart's stopCgroupLeftovers stops it rather than starting a
// second copy beside it) and kill ends it; it used to be skipped as dead.
func TestCgroupMemberWhoseMainThreadExited(t *testing.T) {
	rel, _, mount := testCgroup(t)
	path := filepath.Join(mount+rel, "prog")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
	d, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), testenv.MainThreadExitsEnv+"=1", "GOMAXPROCS=4")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(d.Fd())}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	if err := testenv.AwaitMainThreadExit(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	g := &progCgroup{path: path, mount: mount, dir: d}
	if m := g.members(); !slices.Contains(m, cmd.Process.Pid) {
		t.Fatalf("members() = %v, want it to hold %d, whose main thread exited", m, cmd.Process.Pid)
	}
	g.kill()
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Errorf("process %d, its main thread exited, outlives kill()", cmd.Process.Pid)
	}
}
