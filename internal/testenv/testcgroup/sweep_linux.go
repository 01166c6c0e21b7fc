//go:build linux

package testcgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sweepDeadRuns removes the run cgroups below base (absolute) that a
// killed test binary left (go test's -timeout, kill -9): it never left
// them, so their members (re-exec'd children that ignore SIGTERM, start
// their own session) live on. A run cgroup hbxtest-run-<pid> is a dead
// run's when no process <pid> lives, or when the one that does started
// after the cgroup was seen (a pid reused): then its whole subtree is
// killed (cgroup.kill), and once empty (a minute at most) removed. A run
// whose process lives and may be its maker (a second test binary at
// once, also one leaving its cgroup), or whose lock a process holds
// (holdRun: its maker, whatever the pid and the clocks say; a sweep
// under way beside), is never touched, nor is a cgroup of another name
// (also hbxtest-run-007: not a pid as its maker names it). swept names what was removed; err joins what could
// not be.
func sweepDeadRuns(base string) (swept []string, err error) {
	runs, _ := filepath.Glob(filepath.Join(base, runCgroupPrefix+"*"))
	var errs []error
	for _, run := range runs {
		suffix := strings.TrimPrefix(filepath.Base(run), runCgroupPrefix)
		pid, perr := strconv.Atoi(suffix)
		if perr != nil || pid <= 0 || strconv.Itoa(pid) != suffix {
			continue
		}
		unlock, ok := lockRun(run)
		// One of this process's pid is a dead run's: this run has not
		// made its own yet.
		if !ok || pid != os.Getpid() && runLive(run, pid) {
			unlock()
			continue
		}
		err := killRun(run)
		unlock()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		swept = append(swept, filepath.Base(run))
	}
	return swept, errors.Join(errs...)
}

// lockRun takes the lock of the run cgroup run (a flock of its
// directory), which its maker holds while it lives (holdRun): ok is
// false when another process holds it (a live run, whatever its pid
// says: one of another pid namespace, or a wall clock stepped since its
// start) or run cannot be opened. unlock releases it.
func lockRun(run string) (unlock func(), ok bool) {
	fd, err := syscall.Open(run, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return func() {}, false
	}
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		syscall.Close(fd)
		return func() {}, false
	}
	return func() { syscall.Close(fd) }, true
}

// holdRun takes the lock of this run's cgroup run for as long as the
// process lives or until release (lockRun): a sweep of another test
// binary then never takes it for a dead run's. Its descriptor is not
// inherited (O_CLOEXEC): once this process dies, the run is dead even
// while processes it started live on in the cgroup.
func holdRun(run string) (release func(), err error) {
	fd, err := syscall.Open(run, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", run, err)
	}
	// Blocking: a sweep beside holds it a moment, to see this run lives.
	if err := syscall.Flock(fd, syscall.LOCK_EX); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("lock %s: %w", run, err)
	}
	return func() { syscall.Close(fd) }, nil
}

// runLive reports whether the process pid may be the one that made the
// run cgroup run: it lives and did not start after run was seen (the
// cgroup's ctime, set when the kernel first showed the directory, never
// before its making). In doubt (its start time unreadable, a clock off
// by a second) it is live: a cgroup is swept only when its run is dead.
func runLive(run string, pid int) bool {
	started, err := startTime(pid)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return false
	}
	if err != nil {
		return true
	}
	var st syscall.Stat_t
	if err := syscall.Stat(run, &st); err != nil {
		return true
	}
	seen := time.Unix(st.Ctim.Unix())
	return !started.After(seen.Add(2 * time.Second))
}

// startTime is when process pid started (wall clock, to the second and a
// clock tick): /proc/<pid>/stat's starttime (ticks since boot, USER_HZ
// 100) after /proc/stat's btime.
func startTime(pid int) (time.Time, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return time.Time{}, err
	}
	// Fields after the command (in parentheses, may hold spaces): state
	// is field 3, starttime field 22.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 20 {
		return time.Time{}, fmt.Errorf("read /proc/%d/stat: no starttime", pid)
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("read /proc/%d/stat: starttime: %w", pid, err)
	}
	boot, err := bootTime()
	if err != nil {
		return time.Time{}, err
	}
	return boot.Add(time.Duration(ticks) * time.Second / 100), nil
}

// bootTime is /proc/stat's btime.
func bootTime() (time.Time, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "btime "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("read /proc/stat: btime: %w", err)
			}
			return time.Unix(n, 0), nil
		}
	}
	return time.Time{}, errors.New("read /proc/stat: no btime")
}

// killRun kills every process in the cgroup run's subtree (cgroup.kill,
// SIGKILL), waits (a minute at most) until it is empty, and removes it.
func killRun(run string) error {
	if populated(run) {
		if err := os.WriteFile(filepath.Join(run, "cgroup.kill"), []byte("1"), 0o644); err != nil {
			return fmt.Errorf("kill the dead test run's cgroup %s: %w", run, err)
		}
	}
	for deadline := time.Now().Add(time.Minute); populated(run) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// A cgroup whose last member just exited may refuse (EBUSY) for
		// a moment.
		if err = removeCgroupTree(run); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("remove the dead test run's cgroup %s: %w", run, err)
	}
	return nil
}
