// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MainThreadExitsEnv, set to 1 in a test binary's environment, makes
// ExitMainThreadIfAsked turn that process into one whose main thread has
// exited (exit(2), not exit_group) while another thread lives on: its
// /proc/PID/stat says zombie, yet it runs and cgroup.procs lists it.
const MainThreadExitsEnv = "HBXTEST_MAIN_THREAD_EXITS"

// ExitMainThreadIfAsked, called from a test package's init (which runs
// on the main thread), exits the main thread when MainThreadExitsEnv is
// set, leaving one locked thread that exits the process after 10
// minutes; otherwise it returns at once.
func ExitMainThreadIfAsked() {
	if os.Getenv(MainThreadExitsEnv) == "" {
		return
	}
	started := make(chan struct{})
	go func() {
		runtime.LockOSThread() // a thread of its own, outliving the main one
		close(started)
		time.Sleep(10 * time.Minute)
		os.Exit(0)
	}()
	<-started
	syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0)
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
