package launch

import (
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// group is the process group of a started command whose leader is the
// command's process (Setpgid): the group's id is the leader's pid. It is
// signalled only while the leader is not reaped: until then the pid, and
// so the group's id, cannot name another process or group, however long
// the leader has been dead. Once the leader has exited, what is left in
// its group is killed (wait) before it is reaped; after that, a kill of
// the bare id could reach an unrelated group that took it (the kernel
// reuses ids, pid_max can be 32768).
type group struct {
	pid    int
	mu     sync.Mutex
	exited bool // the leader has exited and its group was killed
}

// signal sends sig to the group while its leader is not reaped, and
// reports whether it did.
func (g *group) signal(sig syscall.Signal) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.exited {
		return false
	}
	return syscall.Kill(-g.pid, sig) == nil
}

// wait waits for cmd's process (the group's leader) to exit without
// reaping it (waitid WNOWAIT), SIGKILLs what is left of its group, and
// then reaps it and waits for its output (cmd.Wait, bounded by
// cmd.WaitDelay), returning what cmd.Wait does. When that wait fails
// (ECHILD: something else in this process reaped the leader) the group
// is not signalled: its id may be another group's by then.
func (g *group) wait(cmd *exec.Cmd) error {
	var err error
	for {
		var info unix.Siginfo
		if err = unix.Waitid(unix.P_PID, g.pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != unix.EINTR {
			break
		}
	}
	g.mu.Lock()
	g.exited = true
	if err == nil {
		_ = syscall.Kill(-g.pid, syscall.SIGKILL)
	}
	g.mu.Unlock()
	return cmd.Wait()
}
