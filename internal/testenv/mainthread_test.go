// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testenv_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testenv/testproc"
)

// parentEnv makes the test binary the "parent" helper: it starts the
// test binary as a process whose main thread exits (watching its parent,
// this helper), prints that process's pid once its main thread exited,
// and sleeps until killed.
const parentEnv = "HBXTEST_MAINTHREAD_PARENT"

func init() {
	testenv.ExitMainThreadIfAsked()
	if os.Getenv(parentEnv) != "" {
		os.Exit(mainThreadParent())
	}
}

// mainThreadParent is the "parent" helper.
func mainThreadParent() int {
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), parentEnv+"=", testenv.MainThreadExitsEnv+"=1", "GOMAXPROCS=4")
	if err := c.Start(); err != nil {
		fmt.Println(err)
		return 1
	}
	if err := testenv.AwaitMainThreadExit(c.Process.Pid); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println(c.Process.Pid)
	time.Sleep(time.Hour)
	return 0
}

// startMainThreadExiter starts the test binary as a process whose main
// thread exits, with env added, and waits until it did; the process is
// killed at the end of the test.
func startMainThreadExiter(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(append(os.Environ(), testenv.MainThreadExitsEnv+"=1", "GOMAXPROCS=4"), env...)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill() })
	if err := testenv.AwaitMainThreadExit(c.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitExit waits up to a minute for c to end and returns how.
func waitExit(t *testing.T, c *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("process %d, its main thread exited, did not end within a minute", c.Process.Pid)
		return nil
	}
}

// TestMainThreadExiterEndsAfterItsBound: a process whose main thread
// exited ends on its own (status 0) once its bound passed, while its
// parent (this test) lives. Before, its surviving goroutine slept 10
// minutes, then called os.Exit through a runtime that cannot stop the
// world any more, and it could stay behind for good.
func TestMainThreadExiterEndsAfterItsBound(t *testing.T) {
	c := startMainThreadExiter(t, testenv.MainThreadBoundEnv+"=2s")
	if err := waitExit(t, c); err != nil {
		t.Errorf("process whose main thread exited ended with %v, want status 0 after its bound", err)
	}
}

// TestMainThreadExiterEndsOnSIGTERM: a stop signal still ends it at once.
func TestMainThreadExiterEndsOnSIGTERM(t *testing.T) {
	c := startMainThreadExiter(t)
	if err := c.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := waitExit(t, c); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("process whose main thread exited, after SIGTERM: %v, want killed by SIGTERM", err)
	}
}

// TestMainThreadExiterEndsWithItsParent: a process whose main thread
// exited (MainThreadExitsEnv=1) ends when its parent dies, well before
// its bound: a test binary killed by a timeout leaves none behind.
// Before, it ran on for 10 minutes at least.
func TestMainThreadExiterEndsWithItsParent(t *testing.T) {
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), parentEnv+"=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { parent.Process.Kill(); parent.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("parent helper printed %q, %v; want the pid of its child", line, err)
	}
	testproc.KillAtEnd(t, pid)
	if !testenv.MainThreadExited(pid) {
		t.Fatalf("child %d: main thread not exited with another thread alive", pid)
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	parent.Wait()
	for deadline := time.Now().Add(time.Minute); !gone(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d, its main thread exited, outlived its parent by a minute", pid)
		}
	}
}

// gone reports whether no thread of pid runs: no such process, or a
// zombie whole (reaped when it is this process's child, as a subreaper's
// orphan is).
func gone(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return true
	}
	if testenv.MainThreadExited(pid) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := strings.LastIndexByte(string(b), ')')
	if err != nil || i < 0 || len(b) < i+3 || b[i+2] != 'Z' {
		return err != nil
	}
	var ws syscall.WaitStatus
	syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	return true
}
