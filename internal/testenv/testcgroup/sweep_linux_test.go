//go:build linux

package testcgroup

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/progcgroup"
	"github.com/hermesbox/hbx/internal/testenv"
)

// sweepBase is a cgroup of the test's own below this process's cgroup,
// for run cgroups the test makes (the machine's, and other test runs',
// are never in it); it is removed when the test ends.
func sweepBase(t *testing.T) string {
	t.Helper()
	mount := progcgroup.Mount("/proc/self/mountinfo")
	own, ok := progcgroup.Of("/proc", os.Getpid())
	if mount == "" || !ok {
		testenv.Missing(t, "no cgroup v2 hierarchy is mounted (this machine kind has one at /sys/fs/cgroup/unified)")
	}
	// Named after this process too: t.TempDir's base name (001) is the
	// same in a second test binary at once, or a killed one's leftover.
	base := filepath.Join(mount, own, "hbxtest-sweep-"+strconv.Itoa(os.Getpid())+"-"+filepath.Base(t.TempDir()))
	if err := os.Mkdir(base, 0o755); errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		testenv.Missing(t, "the cgroup v2 hierarchy is not writable: "+err.Error())
	} else if err != nil {
		t.Fatal(err)
	}
	RemoveCgroup(t, base)
	return base
}

// startIn starts, in the cgroup dir, a process in a session of its own
// that ignores SIGTERM (as a re-exec'd helper can); it is killed and
// reaped when the test ends.
func startIn(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	cmd := exec.Command("/bin/sh", "-c", `trap "" TERM; exec sleep 1000`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start a process in %s: %v", dir, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// deadPid is the pid of a process that ran and was reaped.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestSweepRemovesKilledRuns: the run cgroup of a test binary that was
// killed (its pid dead) is swept at the start of the next run beside it
// (RunInCgroup), which says so: the processes
// left in its subtree (in their own session, ignoring SIGTERM) are
// killed and the cgroup removed, hbx.<id> subtree and all. The run
// cgroup of a live test binary (a second copy running at once) and a
// cgroup of another name are left alone, their processes running.
// Before, nothing removed them: they lived on for hours.
func TestSweepRemovesKilledRuns(t *testing.T) {
	base := sweepBase(t)
	dead := filepath.Join(base, runCgroupPrefix+strconv.Itoa(deadPid(t)))
	leaf := filepath.Join(dead, progcgroup.Subtree("0123456789ab"), "executor")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	leftover, deep := startIn(t, dead), startIn(t, leaf)

	holder := exec.Command("sleep", "1000") // a live test binary, started before its run cgroup
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	live := filepath.Join(base, runCgroupPrefix+strconv.Itoa(holder.Process.Pid))
	other := filepath.Join(base, "hbxtest-probe-x")
	for _, d := range []string{live, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(live, "cgroup.procs"), []byte(strconv.Itoa(holder.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	liveKid, otherKid := startIn(t, live), startIn(t, other)

	// The next test run, started beside them.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(base, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	next := exec.Command(self, "-test.run=^TestLeavesACgroupWhenAsked$")
	next.Env = append(os.Environ(), cgroupRunEnv+"=remove")
	next.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	out, err := next.CombinedOutput()
	syscall.Close(fd)
	if want := "removed the cgroups of 1 killed test runs (their processes killed): " + filepath.Base(dead); err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("the next test run: %v\n%s\nwant it to pass, saying %q", err, out, want)
	}
	for _, c := range []*exec.Cmd{leftover, deep} {
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case err := <-done:
			if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
				t.Errorf("process %d of the killed run ended with %v, want SIGKILL", c.Process.Pid, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("process %d of the killed run still runs a minute after the sweep", c.Process.Pid)
		}
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the killed run's cgroup after the sweep: %v, want it gone", err)
	}
	for _, c := range []*exec.Cmd{holder, liveKid, otherKid} {
		if err := c.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("process %d of a live run or of another cgroup: %v, want it running", c.Process.Pid, err)
		}
	}
	for _, d := range []string{live, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("cgroup %s after the sweep: %v, want it untouched", d, err)
		}
	}
	for _, c := range []*exec.Cmd{holder, liveKid, otherKid} {
		_ = c.Process.Kill()
	}
}

// TestRunLiveTellsAReusedPid: a run cgroup's pid names a live run only
// while that process may have made it: this process, started before the
// cgroup, does; a process started well after it (its pid reused after
// the maker died) does not, nor does a dead pid.
func TestRunLiveTellsAReusedPid(t *testing.T) {
	run := filepath.Join(sweepBase(t), runCgroupPrefix+"1")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if !runLive(run, os.Getpid()) {
		t.Errorf("runLive(a cgroup made after this process, its pid) = false, want true")
	}
	if runLive(run, deadPid(t)) {
		t.Errorf("runLive(a dead pid) = true, want false")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(run, &st); err != nil {
		t.Fatal(err)
	}
	// Past the slack runLive gives a clock off by a second (and /proc's
	// whole-second boot time).
	for seen := time.Unix(st.Ctim.Unix()); time.Since(seen) < 4*time.Second; {
		time.Sleep(100 * time.Millisecond)
	}
	later := exec.Command("sleep", "1000")
	if err := later.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = later.Process.Kill(); _ = later.Wait() })
	if runLive(run, later.Process.Pid) {
		t.Errorf("runLive(a cgroup, a process started 4 s after it) = true, want false: its pid was reused")
	}
}

// TestSweepLeavesALockedRun: a run cgroup whose lock (a flock of its
// directory) a live process holds is a live run's, whatever its pid
// says: a test binary in another pid namespace (its pid means nothing
// here: dead, or another process), or one whose start looks later than
// its cgroup (the wall clock stepped forward since). Its processes keep
// running and it is not removed; nor is a cgroup whose name is not one a
// run makes (hbxtest-run-0<pid>). Before, the pid alone decided: such a
// live run was killed by the next test binary's sweep.
func TestSweepLeavesALockedRun(t *testing.T) {
	base := sweepBase(t)
	run := filepath.Join(base, runCgroupPrefix+strconv.Itoa(deadPid(t)))
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(run, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	// One process holds it (flock locks the shell's descriptor, which
	// sleep keeps): killed, nothing of it is left in the cgroup.
	holder := exec.Command("/bin/sh", "-c", `exec 9<"$1" && flock -x 9 && exec sleep 1000`, "sh", run)
	holder.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	for bound := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			break // the holder has it
		}
		_ = syscall.Flock(fd, syscall.LOCK_UN)
		if time.Now().After(bound) {
			t.Fatal("flock did not take the run cgroup's lock within a minute")
		}
	}
	// Not a name a run makes (its pid with a leading zero): another's.
	odd := filepath.Join(base, runCgroupPrefix+"0"+strconv.Itoa(deadPid(t)))
	if err := os.Mkdir(odd, 0o755); err != nil {
		t.Fatal(err)
	}
	swept, err := sweepDeadRuns(base)
	if len(swept) > 0 || err != nil {
		t.Errorf("sweepDeadRuns beside a locked run and %s = %v, %v; want nothing swept", filepath.Base(odd), swept, err)
	}
	if _, err := os.Stat(odd); err != nil {
		t.Errorf("cgroup %s after the sweep: %v, want it untouched", odd, err)
	}
	if err := holder.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the locked run's process after the sweep: %v, want it running", err)
	}
	if _, err := os.Stat(run); err != nil {
		t.Errorf("the locked run's cgroup after the sweep: %v, want it there", err)
	}
	_ = holder.Process.Kill()
	_ = holder.Wait()
}
