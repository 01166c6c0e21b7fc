package supervisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leaderExitsEnv makes the test binary a process whose main thread
// exits (exit(2), not exit_group) while another thread lives on: its
// /proc/PID/stat says zombie, yet it runs and cgroup.procs lists it.
const leaderExitsEnv = "HBXTEST_SUPERVISOR_LEADER_EXITS"

func init() {
	if os.Getenv(leaderExitsEnv) == "" {
		return
	}
	started := make(chan struct{})
	go func() {
		runtime.LockOSThread() // a thread of its own, outliving the main one
		close(started)
		time.Sleep(10 * time.Minute)
		os.Exit(0)
	}()
	<-started
	// init runs on the main thread, locked to it.
	syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0)
}

// mainThreadExited reports whether pid's main thread is a zombie while
// another of its threads lives.
func mainThreadExited(pid int) bool {
	state := func(p string) byte {
		b, err := os.ReadFile(p)
		i := strings.LastIndexByte(string(b), ')')
		if err != nil || i < 0 || len(b) < i+3 {
			return 0
		}
		return b[i+2]
	}
	if state("/proc/"+strconv.Itoa(pid)+"/stat") != 'Z' {
		return false
	}
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, e := range tasks {
		if s := state("/proc/" + strconv.Itoa(pid) + "/task/" + e.Name() + "/stat"); s != 0 && s != 'Z' {
			return true
		}
	}
	return false
}

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
	cmd.Env = append(os.Environ(), leaderExitsEnv+"=1", "GOMAXPROCS=4")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(d.Fd())}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	for deadline := time.Now().Add(time.Minute); !mainThreadExited(cmd.Process.Pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d: main thread not exited with another thread alive", cmd.Process.Pid)
		}
	}
	g := &progCgroup{path: path, dir: d}
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
