package progcgroup

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hermesbox/hbx/internal/procscan"
)

// subtreePrefix starts the name of hbx's subtree of program cgroups.
const subtreePrefix = "hbx."

// idLen is the length of the hex id after subtreePrefix.
const idLen = 12

// Subtree returns the name of the subtree of program cgroups of the
// supervisor whose id is id (12 hex digits, from its state directory).
func Subtree(id string) string { return subtreePrefix + id }

// Mount returns the mount point of the cgroup v2 hierarchy the
// mountinfo file (/proc/self/mountinfo's format) lists first; "" when
// none is mounted or the file cannot be read.
func Mount(mountinfo string) string {
	f, err := os.Open(mountinfo)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "36 25 0:31 / /sys/fs/cgroup/unified rw,... shared:10 - cgroup2 cgroup2 rw"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fs, pf := strings.Fields(post), strings.Fields(pre)
		if ok && len(fs) > 0 && fs[0] == "cgroup2" && len(pf) >= 5 {
			return pf[4]
		}
	}
	return ""
}

// Of returns the cgroup v2 path of pid ("/a/b", relative to the
// hierarchy's root, "0::" in proc/PID/cgroup); false when pid is gone or
// in no cgroup v2 hierarchy.
func Of(proc string, pid int) (string, bool) {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok {
			return rel, true
		}
	}
	return "", false
}

// IsProgram reports whether rel (a cgroup path) names a program cgroup:
// a child of a subtree named "hbx.<12 hex digits>".
func IsProgram(rel string) bool {
	parent, name := filepath.Split(filepath.Clean(rel))
	sub := filepath.Base(parent)
	id, ok := strings.CutPrefix(sub, subtreePrefix)
	if !ok || len(id) != idLen || name == "" || name == "/" {
		return false
	}
	for _, c := range id {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// Members returns the processes of the program cgroup pid is in (pid
// among them, first), read from its cgroup.procs below the cgroup v2
// mount of the calling process; false when pid is in no program cgroup
// or its members cannot be read (then the caller falls back to the
// process tree).
func Members(proc string, pid int) ([]int, bool) {
	rel, ok := Of(proc, pid)
	if !ok || !IsProgram(rel) {
		return nil, false
	}
	mount := Mount(filepath.Join(proc, "self", "mountinfo"))
	if mount == "" {
		return nil, false
	}
	b, err := os.ReadFile(filepath.Join(mount, rel, "cgroup.procs"))
	if err != nil {
		return nil, false
	}
	pids := []int{pid}
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil && n != pid {
			pids = append(pids, n)
		}
	}
	return pids, true
}

// Procs returns the running members of the cgroup at path (its
// cgroup.procs, an absolute path below the mount): a process whose main
// thread exited while another thread runs counts (procscan.Running);
// nil when there are none or the file cannot be read.
func Procs(path string) []int {
	b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil && procscan.Running(n) {
			pids = append(pids, n)
		}
	}
	return pids
}

// Holds reports whether pid is now a member of the cgroup at path
// (absolute, below mount): its /proc/PID/cgroup names exactly path
// relative to mount, not merely a cgroup whose path ends the same way.
func Holds(mount, path string, pid int) bool {
	rel, ok := Of("/proc", pid)
	return ok && mount != "" && filepath.Join(mount, rel) == filepath.Clean(path)
}

// Signal sends sig to every running member of the cgroup at path for
// which skip (when not nil) is false, each only once proven a member
// through a pidfd (procscan.Signal with Holds as the proof), and returns
// those signalled with their command names. It reads the cgroup v2 mount
// path is below from /proc/self/mountinfo (see SignalIn).
func Signal(path string, sig syscall.Signal, skip func(pid int) bool) []procscan.Process {
	return SignalIn(Mount("/proc/self/mountinfo"), path, sig, skip)
}

// SignalIn is Signal for a path below the cgroup v2 mount mount, for a
// caller that read the mount when it made path and so need not parse
// mountinfo again at each stop.
func SignalIn(mount, path string, sig syscall.Signal, skip func(pid int) bool) []procscan.Process {
	var sent []procscan.Process
	for _, pid := range Procs(path) {
		if skip != nil && skip(pid) {
			continue
		}
		comm := procscan.Comm(pid)
		if procscan.Signal(pid, sig, func(pid int) bool { return Holds(mount, path, pid) }) {
			sent = append(sent, procscan.Process{PID: pid, Command: comm})
		}
	}
	return sent
}
