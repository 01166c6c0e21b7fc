package backup

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hermesbox/hbx/internal/procscan"
)

// checkNotBusy returns a busyError naming the first process (other than
// this one) that has a file open, mapped, or its working or root directory
// inside one of dirs (absolute, symlinks resolved), found through /proc
// (procscan.Dirs: a process whose main thread exited is read through its
// live threads). Processes whose /proc entries this user may not read are skipped: as
// root, none are.
func checkNotBusy(dirs []string) error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil // no procfs: nothing to check with
	}
	self := os.Getpid()
	inside := func(p string) bool {
		p = strings.TrimSuffix(p, " (deleted)")
		for _, d := range dirs {
			if p == d || strings.HasPrefix(p, d+"/") {
				return true
			}
		}
		return false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		hit := ""
		for _, dir := range procscan.Dirs(pid) {
			if hit = holdsInside(dir, inside); hit != "" {
				break
			}
		}
		if hit != "" {
			return &busyError{pid: pid, command: procscan.Comm(pid), path: strings.TrimSuffix(hit, " (deleted)")}
		}
	}
	return nil
}

// holdsInside returns the first path that inside accepts among what the
// /proc directory dir (/proc/PID or /proc/PID/task/TID, procscan.Dirs)
// shows: the working and root directory (not "/"), open files, mapped
// files; "" for none.
func holdsInside(dir string, inside func(string) bool) string {
	for _, l := range []string{"cwd", "root"} {
		if t, err := os.Readlink(filepath.Join(dir, l)); err == nil && inside(t) && t != "/" {
			return t
		}
	}
	if fds, err := os.ReadDir(filepath.Join(dir, "fd")); err == nil {
		for _, fd := range fds {
			if t, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && inside(t) {
				return t
			}
		}
	}
	return mappedInside(filepath.Join(dir, "maps"), inside)
}

// mappedInside returns the first file mapped by the process whose
// /proc/PID/maps is at path that inside accepts, or "".
func mappedInside(path string, inside func(string) bool) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '/'); i >= 0 && inside(line[i:]) {
			return line[i:]
		}
	}
	return ""
}

// resolvedDirs returns dirs with symlinks resolved; missing ones are left
// out.
func resolvedDirs(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			out = append(out, r)
		}
	}
	return out
}
