package procscan

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fileID identifies a file by device and inode. It names a file only
// while a descriptor on that file is open: once the last one closes the
// inode is free and the filesystem may give it to the next file created
// (ext4 does), so a bare fileID is never scanned for; a Pin is.
type fileID struct {
	dev uint64
	ino uint64
}

// ErrPinClosed is returned by a scan through a Pin that was closed.
var ErrPinClosed = errors.New("scan through a closed pin")

// Pin is an open descriptor on a file that /proc is scanned for. Every
// scan by device and inode goes through a Pin and holds the Pin's
// descriptor for its whole length (Close waits for running scans, and a
// scan on a closed Pin fails with ErrPinClosed): while the descriptor is
// open the inode cannot be handed to another file, so a process found
// holding the file's (device, inode) holds this file, and Stop never
// signals a process that only opened a later file given the same inode
// (issue 25 item 6). A Pin's own descriptor, and any O_PATH descriptor, is
// not counted as holding the file.
type Pin struct {
	mu sync.RWMutex
	fd int // -1 once closed
	id fileID
}

// PinFile pins the file f is open on, with a descriptor of its own: f may
// be closed afterwards.
func PinFile(f *os.File) (*Pin, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pin %s: %w", f.Name(), err)
	}
	return newPin(fd, f.Name())
}

// PinPath pins the file at path, following symlinks, with an O_PATH
// descriptor (no read permission needed; a FIFO is not opened). Errors
// wrap the open's (os.ErrNotExist for a missing file).
func PinPath(path string) (*Pin, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	return newPin(fd, path)
}

func newPin(fd int, name string) (*Pin, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pin %s: stat: %w", name, err)
	}
	return &Pin{fd: fd, id: fileID{dev: uint64(st.Dev), ino: st.Ino}}, nil
}

// Close releases the pin's descriptor, after any scan through it ends.
// Closing twice is a no-op.
func (p *Pin) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return nil
	}
	err := unix.Close(p.fd)
	p.fd = -1
	return err
}

// hold keeps p's descriptor open until the returned release is called.
func (p *Pin) hold() (fileID, func(), error) {
	p.mu.RLock()
	if p.fd < 0 {
		p.mu.RUnlock()
		return fileID{}, nil, ErrPinClosed
	}
	return p.id, p.mu.RUnlock, nil
}

// holdAll holds every pin of pins (see hold).
func holdAll(pins []*Pin) ([]fileID, func(), error) {
	ids := make([]fileID, 0, len(pins))
	var releases []func()
	release := func() {
		for _, r := range releases {
			r()
		}
	}
	for _, p := range pins {
		id, r, err := p.hold()
		if err != nil {
			release()
			return nil, nil, err
		}
		ids, releases = append(ids, id), append(releases, r)
	}
	return ids, release, nil
}

// Process is one process found through /proc.
type Process struct {
	PID     int    `json:"pid"`
	Command string `json:"command"` // /proc/PID/comm
	// Since is when the process started (Started), to the second; zero
	// when unknown. Openers and Stop fill it in.
	Since time.Time `json:"since,omitzero"`
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

// Openers returns, for each of pins, the processes other than this one
// that hold its file open, in pid order. Processes whose fd table cannot
// be read are skipped (see the package doc); a missing /proc is an error,
// and so is a closed pin (ErrPinClosed).
func Openers(pins ...*Pin) (map[*Pin][]Process, error) {
	ids, release, err := holdAll(pins)
	if err != nil {
		return nil, err
	}
	defer release()
	m, err := openers(ids)
	if err != nil {
		return nil, err
	}
	out := map[*Pin][]Process{}
	for i, p := range pins {
		if procs := m[ids[i]]; len(procs) > 0 {
			out[p] = procs
		}
	}
	return out, nil
}

// openers is Openers for ids whose pins the caller holds.
func openers(ids []fileID) (map[fileID][]Process, error) {
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan /proc: %w", err)
	}
	out := map[fileID][]Process{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		found := holds(pid, ids)
		if len(found) == 0 {
			continue
		}
		p := Process{PID: pid, Command: comm(pid), Since: Started(pid)}
		for _, id := range found {
			out[id] = append(out[id], p)
		}
	}
	return out, nil
}

// holds returns which of ids pid has open (each once): read from
// /proc/PID/fd, or, when that lists nothing, from the file tables of its
// other threads (see Dirs). O_PATH descriptors (another hbx's Pin) do not
// count: they cannot read, write or lock.
func holds(pid int, ids []fileID) []fileID {
	base := "/proc/" + strconv.Itoa(pid)
	fds, err := os.ReadDir(base + "/fd")
	if err != nil {
		return nil
	}
	if len(fds) > 0 {
		return tableHolds(base, fds, ids, nil)
	}
	var found []fileID
	for _, dir := range threadDirs(base, pid) {
		fds, err := os.ReadDir(dir + "/fd")
		if err != nil {
			continue
		}
		if found = tableHolds(dir, fds, ids, found); len(found) == len(ids) {
			break // threads usually share one table
		}
	}
	return found
}

// Dirs returns the /proc directories whose fd, fdinfo, cwd, root and
// maps show what process pid holds: /proc/PID; when its fd lists
// nothing, those of its other threads too, /proc/PID/task/TID (none for a
// process with no other thread: one with no descriptor open still has
// its working directory and mappings under /proc/PID). A process whose
// main thread exited while another thread runs shows nothing under /proc/PID (the zombie main
// thread's file table, directories and memory are gone) but its live
// threads do. A thread is reached through PID, never as /proc/TID: the
// kernel looks TID up among PID's threads, so a TID reused by another
// process is never read, and what is read belongs to the process that
// has PID now (Signal's pidfd makes that the one signalled).
func Dirs(pid int) []string {
	base := "/proc/" + strconv.Itoa(pid)
	f, err := os.Open(base + "/fd")
	if err != nil {
		return []string{base}
	}
	names, _ := f.Readdirnames(1)
	f.Close()
	if len(names) > 0 {
		return []string{base}
	}
	return append([]string{base}, threadDirs(base, pid)...)
}

// threadDirs returns /proc/PID/task/TID (base is /proc/PID) for each
// thread of pid but the main one; nil when it has no other. The task
// directory's link count is 2 plus the threads (the main one counted
// while any lives), so a single-threaded process, such as every kernel
// thread (their fd lists nothing), costs one stat and no listing.
func threadDirs(base string, pid int) []string {
	var st unix.Stat_t
	if unix.Stat(base+"/task", &st) != nil || st.Nlink <= 3 {
		return nil
	}
	tasks, err := os.ReadDir(base + "/task")
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range tasks {
		if e.Name() != strconv.Itoa(pid) {
			dirs = append(dirs, base+"/task/"+e.Name())
		}
	}
	return dirs
}

// tableHolds appends to found which of ids the file table listed under
// dir (/proc/PID or /proc/PID/task/TID), whose fd entries are fds, has
// open and found lacks.
func tableHolds(dir string, fds []os.DirEntry, ids, found []fileID) []fileID {
	for _, fd := range fds {
		var st unix.Stat_t
		if unix.Stat(dir+"/fd/"+fd.Name(), &st) != nil {
			continue
		}
		id := fileID{dev: uint64(st.Dev), ino: st.Ino}
		if slices.Contains(ids, id) && !slices.Contains(found, id) && !isPathFD(dir, fd.Name()) {
			found = append(found, id)
		}
	}
	return found
}

// isPathFD reports whether descriptor fd of the file table listed under
// dir was opened with O_PATH.
func isPathFD(dir, fd string) bool {
	b, err := os.ReadFile(dir + "/fdinfo/" + fd)
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && flags&unix.O_PATH != 0
		}
	}
	return false
}

// Holds reports whether process pid has p's file open; false when p is
// closed.
func Holds(pid int, p *Pin) bool {
	id, release, err := p.hold()
	if err != nil {
		return false
	}
	defer release()
	return len(holds(pid, []fileID{id})) > 0
}

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

// Running reports whether a thread of process pid still runs: it is
// Alive, or its main thread exited (a zombie in /proc/PID/stat) while
// another thread runs on. Such a process is listed in cgroup.procs,
// keeps its cgroup busy, and a signal to pid ends it; Alive alone would
// call it dead.
func Running(pid int) bool {
	if Alive(pid) {
		return true
	}
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return false
	}
	for _, e := range tasks {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid != pid && Alive(tid) {
			return true
		}
	}
	return false
}

// Stop stops every process that holds pin's file open: sig first, then
// SIGKILL once wait has passed, polling every poll (default 20ms) until
// none is left. It holds pin's descriptor throughout. It returns the
// processes it signalled and whether it had to use SIGKILL; the error says
// which processes were still there when ctx ended or 5s after the SIGKILL,
// or that pin was closed (ErrPinClosed).
func Stop(ctx context.Context, pin *Pin, sig syscall.Signal, wait, poll time.Duration) (stopped []Process, killed bool, err error) {
	id, release, err := pin.hold()
	if err != nil {
		return nil, false, err
	}
	defer release()
	return stop(ctx, id, sig, wait, poll)
}

// stop is Stop for an id whose pin the caller holds.
func stop(ctx context.Context, id fileID, sig syscall.Signal, wait, poll time.Duration) (stopped []Process, killed bool, err error) {
	if poll <= 0 {
		poll = 20 * time.Millisecond
	}
	killAt := time.Now().Add(wait)
	var giveUp time.Time
	signalled := map[int]syscall.Signal{}
	for {
		m, err := openers([]fileID{id})
		if err != nil {
			return stopped, killed, err
		}
		var left []Process
		for _, p := range m[id] {
			if Running(p.PID) {
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
			Signal(p.PID, want, func(pid int) bool { return len(holds(pid, []fileID{id})) > 0 })
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

// userHZ is the unit of /proc/PID/stat's start time: clock ticks of
// USER_HZ, 100 a second on every Linux architecture (proc(5); the
// kernel converts to it whatever its internal HZ).
const userHZ = 100

// Started returns when pid started, to USER_HZ ticks: its start time in
// /proc/PID/stat (time after boot, suspends counted) subtracted from the
// time since boot now (CLOCK_BOOTTIME), taken from the wall clock now.
// Zero when either cannot be read.
func Started(pid int) time.Time {
	st, err := ReadStat(pid)
	if err != nil {
		return time.Time{}
	}
	now := time.Now()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Time{}
	}
	age := time.Duration(ts.Nano()) - time.Duration(st.StartTime)*(time.Second/userHZ)
	return now.Add(-age).UTC()
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
