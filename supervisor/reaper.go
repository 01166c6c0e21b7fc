package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/procscan"
)

// reaper is the one owner of every wait in the process: it reaps any child
// with wait4(-1, WNOHANG) on SIGCHLD and hands each status to the channel
// registered for its pid. Unknown pids (orphans reparented to the
// subreaper) are reaped silently.
type reaper struct {
	log *slog.Logger

	// mu is held across a fork and its registration, and across each
	// wait4 and its dispatch, so a child that exits at once cannot be
	// reaped before its channel is registered.
	mu      sync.Mutex
	waiters map[int]chan<- syscall.WaitStatus
	sigs    chan os.Signal

	// forking is held for writing across each fork until the child has
	// exec'd (ForkExec returns only then), and for reading across each
	// look for the holders of a program's marker (see noForks).
	forking sync.RWMutex
}

func newReaper(log *slog.Logger) *reaper {
	r := &reaper{log: log, waiters: map[int]chan<- syscall.WaitStatus{}, sigs: make(chan os.Signal, 1)}
	signal.Notify(r.sigs, syscall.SIGCHLD)
	return r
}

// run reaps on every SIGCHLD until ctx ends.
func (r *reaper) run(ctx context.Context) {
	defer signal.Stop(r.sigs)
	r.reap() // children that exited before Notify
	for {
		select {
		case <-r.sigs:
			r.reap()
		case <-ctx.Done():
			return
		}
	}
}

// reap collects every exited child.
func (r *reaper) reap() {
	for {
		r.mu.Lock()
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			r.mu.Unlock()
			continue
		}
		if pid <= 0 || err != nil {
			r.mu.Unlock()
			return
		}
		ch := r.waiters[pid]
		delete(r.waiters, pid)
		r.mu.Unlock()
		if ch != nil {
			ch <- ws // buffered, one status per pid
		} else {
			r.log.Debug("reaped orphan", "pid", pid, "status", describeExit(ws))
		}
	}
}

// spawn runs fork (which returns the child's pid) with the registration
// lock held and registers ch for the pid. ch must have room for one status.
func (r *reaper) spawn(fork func() (int, error), ch chan<- syscall.WaitStatus) (int, error) {
	r.forking.Lock()
	defer r.forking.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err != nil {
		return 0, err
	}
	r.waiters[pid] = ch
	return pid, nil
}

// noForks waits until no child of this process is between its fork and
// its exec, keeps it so until the returned function is called, and
// returns that function. Between fork and exec a child holds every
// descriptor of the supervisor, each program's marker among them, so a
// look for a program's processes would take it for one that left the
// program's process group, and stop it: under qemu-user, which forks
// where Go asks for vfork, that window lasts milliseconds, and a program
// waiting to start stopped another program's fresh child.
func (r *reaper) noForks() (done func()) {
	r.forking.RLock()
	return r.forking.RUnlock
}

// setSubreaper makes this process a child subreaper. qemu-user does not
// implement the prctl (EINVAL), nor may every sandbox; Run goes on
// without it (see the package doc). A variable so tests can refuse it.
var setSubreaper = func() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// signalGroup sends sig to process group pgid if it still has a member,
// zombies included, and reports whether it did. It holds mu across the
// look and the kill, so no wait4 here reaps a member in between: a
// process group's id is not reused while any member exists, and as a
// child subreaper this process holds the last member of a program's
// group as its zombie (it is the leader's parent, and an orphan's) until
// reap runs. So the kill never reaches an unrelated group that took the
// id once the program's group was gone (kill(2) on a bare -pgid would,
// after a pid wrap).
func (r *reaper) signalGroup(pgid int, sig syscall.Signal) bool {
	if pgid <= 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if syscall.Kill(-pgid, 0) == syscall.ESRCH {
		return false
	}
	return syscall.Kill(-pgid, sig) == nil
}

// killChildren sends SIGKILL to every child of this process (descendants
// reparented to the subreaper that left their program's group) and
// returns their pids. It holds mu from the listing to the last kill, so
// none of them is reaped, and its pid taken by an unrelated process, in
// between.
func (r *reaper) killChildren() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	kids := childrenOf(os.Getpid())
	for _, pid := range kids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return kids
}

// groupAlive reports whether process group pgid has any member left
// that is not a zombie (see procscan.GroupAlive).
func groupAlive(pgid int) bool {
	return procscan.GroupAlive(pgid)
}

// childrenOf lists the pids whose parent is ppid, from /proc.
func childrenOf(ppid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("PPid:")); ok {
				if n, _ := strconv.Atoi(string(bytes.TrimSpace(v))); n == ppid {
					out = append(out, pid)
				}
				break
			}
		}
	}
	return out
}

// describeExit renders a wait status: "exit status 3" or
// "terminated by SIGKILL".
func describeExit(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "terminated by " + signalName(ws.Signal())
	}
	return "exit status " + strconv.Itoa(ws.ExitStatus())
}

// signalName returns "SIGTERM" for syscall.SIGTERM.
func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return "signal " + strconv.Itoa(int(s))
}

// pgidOf returns pid's process group, 0 when it cannot be read.
func pgidOf(pid int) int {
	g, err := syscall.Getpgid(pid)
	if err != nil {
		return 0
	}
	return g
}
