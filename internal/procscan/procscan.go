package procscan

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// FileID identifies a file by device and inode.
type FileID struct {
	Dev uint64
	Ino uint64
}

// IDOf returns the FileID of f.
func IDOf(f *os.File) (FileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return FileID{}, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	return FileID{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

// IDOfPath returns the FileID of the file at path, following symlinks.
func IDOfPath(path string) (FileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return FileID{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return FileID{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

// Process is one process found through /proc.
type Process struct {
	PID     int    `json:"pid"`
	Command string `json:"command"` // /proc/PID/comm
}

func (p Process) String() string { return fmt.Sprintf("%d (%s)", p.PID, p.Command) }

// Join renders procs as "12 (bun), 13 (sh)".
func Join(procs []Process) string {
	s := make([]string, len(procs))
	for i, p := range procs {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// Openers returns, for each of ids, the processes other than this one
// that hold it open, in pid order. Processes whose fd table cannot be read
// are skipped (see the package doc); a missing /proc is an error.
func Openers(ids ...FileID) (map[FileID][]Process, error) {
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan /proc: %w", err)
	}
	out := map[FileID][]Process{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		for _, id := range holds(pid, ids) {
			out[id] = append(out[id], Process{PID: pid, Command: comm(pid)})
		}
	}
	return out, nil
}

// holds returns which of ids pid has open (each once).
func holds(pid int, ids []FileID) []FileID {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var found []FileID
	for _, fd := range fds {
		var st unix.Stat_t
		if unix.Stat(dir+"/"+fd.Name(), &st) != nil {
			continue
		}
		id := FileID{Dev: uint64(st.Dev), Ino: st.Ino}
		if slices.Contains(ids, id) && !slices.Contains(found, id) {
			found = append(found, id)
		}
	}
	return found
}

// Holds reports whether process pid has the file id open.
func Holds(pid int, id FileID) bool { return len(holds(pid, []FileID{id})) > 0 }

// comm returns the process's command name, "?" when it cannot be read.
func comm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return !(i > 0 && len(s) > i+2 && s[i+2] == 'Z')
}

// Stop stops every process that holds id open: sig first, then SIGKILL
// once wait has passed, polling every poll (default 20ms) until none is
// left. It returns the processes it signalled and whether it had to use
// SIGKILL; the error says which processes were still there when ctx ended
// or 5s after the SIGKILL.
func Stop(ctx context.Context, id FileID, sig syscall.Signal, wait, poll time.Duration) (stopped []Process, killed bool, err error) {
	if poll <= 0 {
		poll = 20 * time.Millisecond
	}
	killAt := time.Now().Add(wait)
	var giveUp time.Time
	signalled := map[int]syscall.Signal{}
	for {
		m, err := Openers(id)
		if err != nil {
			return stopped, killed, err
		}
		var left []Process
		for _, p := range m[id] {
			if Alive(p.PID) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return stopped, killed, nil
		}
		now := time.Now()
		if !now.Before(killAt) && !killed {
			killed = true
			giveUp = now.Add(5 * time.Second)
		}
		if killed && now.After(giveUp) {
			return stopped, killed, fmt.Errorf("stop %s: still alive after SIGKILL", Join(left))
		}
		for _, p := range left {
			want := sig
			if killed {
				want = syscall.SIGKILL
			}
			if signalled[p.PID] == want {
				continue
			}
			if _, seen := signalled[p.PID]; !seen {
				stopped = append(stopped, p)
			}
			if Holds(p.PID, id) {
				_ = syscall.Kill(p.PID, want)
			}
			signalled[p.PID] = want
		}
		select {
		case <-ctx.Done():
			return stopped, killed, fmt.Errorf("stop %s: %w", Join(left), ctx.Err())
		case <-time.After(poll):
		}
	}
}

// Stat is what hbx reads of /proc/PID/stat.
type Stat struct {
	PID   int
	State byte // R, S, D, Z...
	PGID  int
	// StartTime is when the process started, in clock ticks after boot:
	// with PID it identifies a process (pids are reused).
	StartTime uint64
}

// ReadStat reads /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || len(s) < i+2 {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 20 || len(f[0]) == 0 {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	st := Stat{PID: pid, State: f[0][0]}
	st.PGID, _ = strconv.Atoi(f[2])
	st.StartTime, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// Group returns the live (not zombie) members of process group pgid.
func Group(pgid int) []Stat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []Stat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := ReadStat(pid); err == nil && st.PGID == pgid && st.State != 'Z' {
			out = append(out, st)
		}
	}
	return out
}

// Comm returns the command name of pid, "?" when it cannot be read.
func Comm(pid int) string { return comm(pid) }

// GroupAlive reports whether process group pgid has a member that is not
// a zombie. kill(-pgid, 0) alone counts zombies: a member orphaned to a
// parent that does not reap (a subreaper ancestor other than init, when
// the supervisor could not become one) would keep the group "alive" for
// ever. When /proc cannot be read it trusts kill alone.
func GroupAlive(pgid int) bool {
	if pgid <= 0 || syscall.Kill(-pgid, 0) == syscall.ESRCH {
		return false
	}
	// The leader, whose pid is the group's id, first: while it lives no
	// scan is needed.
	if st, err := ReadStat(pgid); err == nil && st.PGID == pgid && st.State != 'Z' {
		return true
	}
	if _, err := os.ReadDir("/proc"); err != nil {
		return true
	}
	return len(Group(pgid)) > 0
}
