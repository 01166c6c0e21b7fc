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
// once, also one leaving its cgroup) is never touched, nor is a cgroup
// of another name. swept names what was removed; err joins what could
// not be.
func sweepDeadRuns(base string) (swept []string, err error) {
	runs, _ := filepath.Glob(filepath.Join(base, runCgroupPrefix+"*"))
	var errs []error
	for _, run := range runs {
		pid, perr := strconv.Atoi(strings.TrimPrefix(filepath.Base(run), runCgroupPrefix))
		// One of this process's pid is a dead run's: this run has not
		// made its own yet.
		if perr != nil || pid <= 0 || pid != os.Getpid() && runLive(run, pid) {
			continue
		}
		if err := killRun(run); err != nil {
			errs = append(errs, err)
			continue
		}
		swept = append(swept, filepath.Base(run))
	}
	return swept, errors.Join(errs...)
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
