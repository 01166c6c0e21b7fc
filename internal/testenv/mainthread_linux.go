// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MainThreadExitsEnv, set in a test binary's environment, makes
// ExitMainThreadIfAsked turn that process into one whose main thread has
// exited (exit(2), not exit_group) while another thread lives on: its
// /proc/PID/stat says zombie, yet it runs and cgroup.procs lists it. Its
// value names the process whose end ends it: "1" its parent, a PID above
// 1 that process (MainThreadExitsWatching: a helper started by another
// helper that a test kills on purpose watches the test process instead).
const MainThreadExitsEnv = "HBXTEST_MAIN_THREAD_EXITS"

// MainThreadBoundEnv, a duration (time.ParseDuration), replaces the 10
// minutes after which such a process ends whatever it watches.
const MainThreadBoundEnv = "HBXTEST_MAIN_THREAD_BOUND"

// MainThreadExitsWatching is MainThreadExitsEnv's environment entry for
// a process that ends when process pid ends.
func MainThreadExitsWatching(pid int) string {
	return MainThreadExitsEnv + "=" + strconv.Itoa(pid)
}

// ExitMainThreadIfAsked, called from a test package's init (which runs
// on the main thread), exits the main thread when MainThreadExitsEnv is
// set, leaving one locked thread that ends the whole process (exit_group,
// status 0) as soon as the process the variable names ends, or after 10
// minutes (MainThreadBoundEnv) at the latest; otherwise it returns at
// once. The thread waits with raw system calls only, SIGURG (the
// runtime's preemption signal) blocked: how it ends does not depend on
// the Go scheduler of a process whose main thread vanished while it held
// a P (a sleep or os.Exit through the runtime did, and such a process was
// seen to stay behind). Signals that end a Go program (SIGTERM, SIGKILL)
// still end it at once.
func ExitMainThreadIfAsked() {
	v := os.Getenv(MainThreadExitsEnv)
	if v == "" {
		return
	}
	bound := 10 * time.Minute
	if d, err := time.ParseDuration(os.Getenv(MainThreadBoundEnv)); err == nil && d > 0 {
		bound = d
	}
	var ready atomic.Bool
	go func() {
		runtime.LockOSThread() // a thread of its own, outliving the main one
		w := newOwnerWatch(v, bound)
		ready.Store(true)
		w.wait()
	}()
	for !ready.Load() {
		runtime.Gosched()
	}
	syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0)
}

// ownerWatch is what the surviving thread waits on: the owner's pidfd
// (nfds 0 without one) and the time left.
type ownerWatch struct {
	fd   unix.PollFd
	nfds uintptr
	left unix.Timespec
}

// newOwnerWatch opens a pidfd of the process v names ("1": the parent;
// checked still to be the parent once open, else the wait ends at once),
// waits bound at most, and blocks SIGURG (the runtime's preemption
// signal) on the calling thread. Without pidfds (Linux before 5.3) only
// the bound ends the wait.
func newOwnerWatch(v string, bound time.Duration) *ownerWatch {
	w := &ownerWatch{left: unix.NsecToTimespec(bound.Nanoseconds())}
	parent := os.Getppid()
	owner := parent
	if pid, err := strconv.Atoi(v); err == nil && pid > 1 {
		owner = pid
	}
	if fd, err := unix.PidfdOpen(owner, 0); err == nil {
		w.fd, w.nfds = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}, 1
		if owner == parent && os.Getppid() != parent {
			w.left = unix.Timespec{} // the parent died before its pidfd was open
		}
	}
	var urg unix.Sigset_t
	urg.Val[(unix.SIGURG-1)/64] |= 1 << ((uint(unix.SIGURG) - 1) % 64)
	_ = unix.PthreadSigmask(unix.SIG_BLOCK, &urg, nil)
	return w
}

// wait blocks until the owner ends or the time left runs out (ppoll
// writes back what is left when a signal interrupts it), then ends the
// process. Raw system calls in nosplit code only: nothing here enters
// the Go scheduler, which no longer works.
//
//go:nosplit
//go:norace
func (w *ownerWatch) wait() {
	for {
		_, _, e := syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&w.fd)), w.nfds, uintptr(unsafe.Pointer(&w.left)), 0, 0, 0)
		if e != syscall.EINTR {
			break
		}
	}
	syscall.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
}

// AwaitMainThreadExit polls (every 5 ms, for a minute at most) until
// pid's main thread has exited while another of its threads lives
// (MainThreadExited), as a process started with MainThreadExitsEnv does
// soon after it starts; the error names pid when it did not.
func AwaitMainThreadExit(pid int) error { return awaitMainThreadExit(pid, time.Minute) }

func awaitMainThreadExit(pid int, within time.Duration) error {
	for deadline := time.Now().Add(within); !MainThreadExited(pid); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d: main thread not exited with another thread alive within %s", pid, within)
		}
	}
	return nil
}

// MainThreadExited reports whether pid's main thread is a zombie while
// another of its threads lives (read from /proc, apart from the product's
// own procscan, so tests of it have an independent oracle).
func MainThreadExited(pid int) bool {
	state := func(p string) byte {
		b, err := os.ReadFile(p)
		i := strings.LastIndexByte(string(b), ')')
		if err != nil || i < 0 || len(b) < i+3 {
			return 0
		}
		return b[i+2]
	}
	if state("/proc/"+strconv.Itoa(pid)+"/stat") != 'Z' {
		return false
	}
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, e := range tasks {
		if s := state("/proc/" + strconv.Itoa(pid) + "/task/" + e.Name() + "/stat"); s != 0 && s != 'Z' {
			return true
		}
	}
	return false
}
