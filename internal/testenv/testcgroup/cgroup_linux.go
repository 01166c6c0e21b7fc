//go:build linux

package testcgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/progcgroup"
)

// runCgroupPrefix names the cgroup a test binary runs its tests in:
// <its own cgroup>/hbxtest-run-<pid>.
const runCgroupPrefix = "hbxtest-run-"

// RunInCgroup runs m's tests in a cgroup of their own, where a writable
// cgroup v2 hierarchy is mounted: <this process's cgroup>/hbxtest-run-<pid>,
// which this process (and so every process it starts) enters first.
// Before, it removes the run cgroups beside it of test binaries that were
// killed (go test's -timeout, kill -9), killing what still runs in them;
// those of live runs (a second test binary at once) it leaves alone: each
// run holds a flock of its run cgroup's directory while it lives.
// Every cgroup hbx makes below its own cgroup (a supervisor's or a
// rehearsal's hbx.<id> subtree) is then made below it, never beside the
// cgroups of other test runs or of the machine. Once the tests are
// done, this process returns to its cgroup, waits (a minute at most)
// for what still runs in the run cgroup to exit, and removes the run
// cgroup with everything in it: all of it is this run's. Each hbx.<id>
// subtree still there was left by a test that did not remove what it
// made (RemoveCgroup): they are named on stderr and, when strict, the
// run fails (exit code 1); e2e's hbx commands, killed with -9 on purpose,
// leave theirs, and it is not strict. A run cgroup that cannot be
// removed (a process still in it after a minute) fails the run either
// way. Where no writable hierarchy is mounted, m runs as it is.
func RunInCgroup(m *testing.M, strict bool) int {
	run, back, err := enterRunCgroup()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: the tests run in this process's cgroup: %v\n", err)
		return m.Run()
	}
	release, err := holdRun(run)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v (a sweep beside may take this run for a dead one)\n", err)
		release = func() {}
	}
	code := m.Run()
	left, err := leaveRunCgroup(run, back)
	release()
	switch {
	case len(left) > 0 && strict:
		fmt.Fprintf(os.Stderr, "FAIL: the tests left %d cgroups of their own behind (removed now): %s\n", len(left), strings.Join(left, " "))
		code = 1
	case len(left) > 0:
		fmt.Fprintf(os.Stderr, "note: the tests left %d cgroups of their own behind (removed now): %s\n", len(left), strings.Join(left, " "))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: remove the tests' cgroup %s: %v\n", run, err)
		code = 1
	}
	return code
}

// enterRunCgroup sweeps the run cgroups of dead test runs beside its own
// (sweepDeadRuns), makes the run cgroup and moves this process into it;
// back is the cgroup it came from (absolute paths).
func enterRunCgroup() (run, back string, err error) {
	mount := progcgroup.Mount("/proc/self/mountinfo")
	if mount == "" {
		return "", "", errors.New("no cgroup v2 hierarchy is mounted")
	}
	own, ok := progcgroup.Of("/proc", os.Getpid())
	if !ok {
		return "", "", errors.New("this process's cgroup is unknown")
	}
	back = filepath.Join(mount, own)
	sweep(back)
	run = filepath.Join(back, runCgroupPrefix+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(run, 0o755); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(run, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.Remove(run)
		return "", "", fmt.Errorf("enter %s: %w", run, err)
	}
	return run, back, nil
}

// sweep removes the run cgroups of dead test runs in base and says so on
// stderr: what it removed, and what it could not (the run goes on).
func sweep(base string) {
	swept, err := sweepDeadRuns(base)
	if len(swept) > 0 {
		fmt.Fprintf(os.Stderr, "note: removed the cgroups of %d killed test runs (their processes killed): %s\n", len(swept), strings.Join(swept, " "))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
	}
}

// leaveRunCgroup moves this process back to back, waits until run's
// subtree has no member, and removes it; left are the hbx.<id> subtrees
// (below run) that were still there.
func leaveRunCgroup(run, back string) (left []string, err error) {
	if err := os.WriteFile(filepath.Join(back, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, fmt.Errorf("leave %s: %w", run, err)
	}
	for deadline := time.Now().Add(time.Minute); populated(run) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	trees, _ := filepath.Glob(filepath.Join(run, progcgroup.Subtree("*")))
	for _, tree := range trees {
		left = append(left, strings.TrimPrefix(tree, run+"/"))
	}
	return left, removeCgroupTree(run)
}

// populated reports whether the cgroup dir, or one below it, has a member
// (cgroup.events' "populated 1"); a missing dir is not.
func populated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	return err == nil && slices.Contains(strings.Split(string(b), "\n"), "populated 1")
}

// removeCgroupTree removes the cgroup dir and every cgroup below it,
// deepest first; a missing dir is not an error.
func removeCgroupTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return err
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, p := range slices.Backward(dirs) {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// RemoveCgroup removes, when the test ends, the cgroup path (absolute,
// below the cgroup v2 mount) and every cgroup below it, once (a minute
// at most) nothing runs in it any more: a test that makes, or has hbx
// make, a cgroup says so here. A cgroup still populated then, or not
// removable, fails the test; a missing one is not.
func RemoveCgroup(t testing.TB, path string) {
	t.Helper()
	t.Cleanup(func() { removeWhenEmpty(t, path) })
}

// removeWhenEmpty waits (a minute at most) until nothing runs in the
// cgroup path, then removes it and every cgroup below it; it fails t
// when it cannot.
func removeWhenEmpty(t testing.TB, path string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); populated(path) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// A cgroup whose last member just exited may refuse (EBUSY) for
		// a moment.
		if err = removeCgroupTree(path); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Errorf("remove the test's cgroup %s: %v", path, err)
	}
}

// RemoveNewCgroups removes, when the test ends, every hbx.<id> subtree
// made below this process's cgroup during the test (by hbx in this
// process or in a process it started, such as an hbx command), as
// RemoveCgroup does. It does so only inside RunInCgroup's run cgroup,
// where every cgroup is this run's, and for a test that runs alone (no
// t.Parallel): elsewhere it removes nothing.
func RemoveNewCgroups(t testing.TB) {
	t.Helper()
	own, ok := progcgroup.Of("/proc", os.Getpid())
	mount := progcgroup.Mount("/proc/self/mountinfo")
	if !ok || mount == "" || filepath.Base(own) != runCgroupPrefix+strconv.Itoa(os.Getpid()) {
		return
	}
	glob := filepath.Join(mount, own, progcgroup.Subtree("*"))
	before, _ := filepath.Glob(glob)
	t.Cleanup(func() {
		now, _ := filepath.Glob(glob)
		for _, tree := range now {
			if !slices.Contains(before, tree) {
				removeWhenEmpty(t, tree)
			}
		}
	})
}
