package datalock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/procscan"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testenv/testproc"
)

// The test binary doubles as the lock's holders (HBXTEST_DATALOCK):
//
//	owner       Acquire HBXTEST_DIR as "test owner", print "ready", sleep
//	owner-leaf  Acquire, start a "leaf" that inherits the lock as fd 3,
//	            print the leaf's pid, sleep
//	leaf        ignore SIGTERM, print "ready", sleep
//	owner-mainexit  Acquire, start this binary inheriting the lock as a
//	            process whose main thread exited (testenv.MainThreadExitsEnv),
//	            print its pid once it is one, sleep
func TestMain(m *testing.M) {
	switch os.Getenv("HBXTEST_DATALOCK") {
	case "":
		os.Exit(m.Run())
	case "owner", "owner-leaf":
		l, err := Acquire(context.Background(), os.Getenv("HBXTEST_DIR"), Options{Command: "test owner"})
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		if os.Getenv("HBXTEST_DATALOCK") == "owner-leaf" {
			c := exec.Command(os.Args[0])
			c.Env = append(os.Environ(), "HBXTEST_DATALOCK=leaf")
			c.ExtraFiles = []*os.File{l.File()}
			c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			out, _ := c.StdoutPipe()
			if err := c.Start(); err != nil {
				fmt.Println(err)
				os.Exit(1)
			}
			bufio.NewReader(out).ReadString('\n')
			fmt.Println(c.Process.Pid)
		} else {
			fmt.Println("ready")
		}
	case "leaf":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
	case "owner-mainexit":
		os.Exit(ownerMainExit())
	}
	time.Sleep(time.Hour)
}

// init lets the test binary become a process whose main thread exited
// (testenv.MainThreadExitsEnv), holding the files it inherited.
func init() { testenv.ExitMainThreadIfAsked() }

// ownerMainExit is the "owner-mainexit" helper.
func ownerMainExit() int {
	l, err := Acquire(context.Background(), os.Getenv("HBXTEST_DIR"), Options{Command: "test owner"})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	c := exec.Command(os.Args[0])
	// It outlives this helper (the test kills it), not the test.
	c.Env = append(os.Environ(), "HBXTEST_DATALOCK=", testenv.MainThreadExitsWatching(os.Getppid()), "GOMAXPROCS=4")
	c.ExtraFiles = []*os.File{l.File()}
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
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

// holder starts the test binary as helper h on dataDir and returns it
// with the first line it printed.
func holder(t *testing.T, h, dataDir string) (*exec.Cmd, string) {
	t.Helper()
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), "HBXTEST_DATALOCK="+h, "HBXTEST_DIR="+dataDir)
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper %s: %v", h, err)
	}
	return c, strings.TrimSpace(line)
}

func TestPath(t *testing.T) {
	for in, want := range map[string]string{
		"/workspace/executor/data":   "/workspace/executor/.data.lock",
		"/workspace/executor/data/":  "/workspace/executor/.data.lock",
		"/workspace/executor//data/": "/workspace/executor/.data.lock",
		"/data":                      "/.data.lock",
	} {
		if got := Path(in); got != want {
			t.Errorf("Path(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckFreeCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := Check(data); err != nil {
		t.Fatalf("Check() = %v, want nil", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("Check() created %v", ents)
	}
	l, err := Acquire(context.Background(), data, Options{Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := Check(data); err != nil {
		t.Errorf("Check() after Release = %v, want nil", err)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Acquire created the data directory itself: %v", err)
	}
}

func TestLiveOwnerRefuses(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	c, _ := holder(t, "owner", data)
	pid := c.Process.Pid
	for what, err := range map[string]error{
		"Check": Check(data),
		"Acquire": func() error {
			_, err := Acquire(context.Background(), data, Options{Command: "second", StopLeftovers: true})
			return err
		}(),
	} {
		var be *BusyError
		if !errors.As(err, &be) || !errors.Is(err, ErrBusy) {
			t.Fatalf("%s() = %v, want a *BusyError", what, err)
		}
		if be.Leftovers || be.Owner.PID != pid || be.Owner.Command != "test owner" {
			t.Errorf("%s() = %+v, want the live owner pid %d", what, be, pid)
		}
		if msg := err.Error(); !strings.Contains(msg, "pid "+strconv.Itoa(pid)+" (test owner) since ") || strings.Contains(msg, "\n") {
			t.Errorf("%s() = %q, want one line naming pid %d (test owner) since", what, msg, pid)
		}
	}
	if !procscan.Alive(pid) {
		t.Errorf("the owner %d was stopped", pid)
	}
}

// The lock outlives its owner's SIGKILL for as long as a process that
// inherited it lives; Acquire then names or stops those leftovers.
func TestLeftoversHoldTheLock(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	c, line := holder(t, "owner-leaf", data)
	leaf, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("owner-leaf printed %q", line)
	}
	testproc.KillAtEnd(t, leaf)
	owner := c.Process.Pid
	c.Process.Kill()
	c.Wait()

	var be *BusyError
	if err := Check(data); !errors.As(err, &be) || !be.Leftovers || len(be.Processes) != 1 || be.Processes[0].PID != leaf || be.Owner.PID != owner {
		t.Fatalf("Check() = %v, want leftovers [%d] of dead owner %d", err, leaf, owner)
	}
	if _, err := Acquire(context.Background(), data, Options{Command: "second"}); !errors.As(err, &be) || !be.Leftovers {
		t.Fatalf("Acquire() without StopLeftovers = %v, want leftovers named", err)
	} else if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("pid %d (", leaf)) || !strings.Contains(msg, fmt.Sprintf("left running by pid %d (test owner)", owner)) {
		t.Errorf("Acquire() = %q, want the leaf and the dead owner named", msg)
	}
	if !procscan.Alive(leaf) {
		t.Fatal("Acquire without StopLeftovers stopped the leaf")
	}
	start := time.Now()
	l, err := Acquire(context.Background(), data, Options{Command: "second", StopLeftovers: true, StopWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("Acquire(StopLeftovers) = %v", err)
	}
	defer l.Release()
	if len(l.Stopped) != 1 || l.Stopped[0].PID != leaf || !l.Killed {
		t.Errorf("Acquire(StopLeftovers) stopped %v killed=%v, want [%d] killed (it ignores SIGTERM)", l.Stopped, l.Killed, leaf)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("Acquire(StopLeftovers) took %s: SIGKILL before StopWait", took)
	}
	if procscan.Alive(leaf) {
		t.Errorf("leaf %d still alive", leaf)
	}
}

// TestLeftoverWhoseMainThreadExitedIsNamed: what a payload process (a
// program cgroup's member under hbx supervise) leaves holding the data
// lock after its owner's SIGKILL may be a process whose main thread
// exited while another thread runs. Check and Acquire name it as they
// name other holders: pid, command and since when; Acquire with
// StopLeftovers stops it. It used to be "processes not visible in /proc
// to this user": its /proc/PID/fd lists nothing.
func TestLeftoverWhoseMainThreadExitedIsNamed(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	began := time.Now().Add(-time.Second) // Since is to USER_HZ ticks
	c, line := holder(t, "owner-mainexit", data)
	leaf, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("owner-mainexit printed %q", line)
	}
	testproc.KillAtEnd(t, leaf)
	c.Process.Kill()
	c.Wait()
	for what, err := range map[string]error{
		"Check": Check(data),
		"Acquire": func() error {
			_, err := Acquire(context.Background(), data, Options{Command: "second"})
			return err
		}(),
	} {
		var be *BusyError
		if !errors.As(err, &be) || !be.Leftovers || len(be.Processes) != 1 || be.Processes[0].PID != leaf {
			t.Fatalf("%s() = %v, want leftover %d named", what, err, leaf)
		}
		p := be.Processes[0]
		if p.Command != "datalock.test" || p.Since.Before(began) || p.Since.After(time.Now().Add(time.Second)) {
			t.Errorf("%s(): leftover %+v, want command datalock.test since this test began (%s)", what, p, began)
		}
		want := fmt.Sprintf("pid %d (datalock.test) since %s", leaf, p.Since.UTC().Format(time.RFC3339))
		if msg := err.Error(); !strings.Contains(msg, want) {
			t.Errorf("%s() = %q, want it to name %q", what, msg, want)
		}
	}
	l, err := Acquire(context.Background(), data, Options{Command: "second", StopLeftovers: true, StopWait: time.Minute})
	if err != nil {
		t.Fatalf("Acquire(StopLeftovers) = %v", err)
	}
	defer l.Release()
	if len(l.Stopped) != 1 || l.Stopped[0].PID != leaf {
		t.Errorf("Acquire(StopLeftovers) stopped %v, want [%d]", l.Stopped, leaf)
	}
}

// Release leaves the flock to a payload that inherited it.
func TestReleaseKeepsPayloadsLock(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	l, err := Acquire(context.Background(), data, Options{Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), "HBXTEST_DATALOCK=leaf")
	c.ExtraFiles = []*os.File{l.File()}
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { c.Process.Kill(); c.Wait() }()
	bufio.NewReader(out).ReadString('\n')
	if err := Check(data); !errors.Is(err, ErrBusy) {
		t.Fatalf("Check() with an owner = %v, want ErrBusy", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	var be *BusyError
	if err := Check(data); !errors.As(err, &be) || !be.Leftovers || be.Processes[0].PID != c.Process.Pid {
		t.Fatalf("Check() after Release = %v, want the payload %d as leftover", err, c.Process.Pid)
	}
	c.Process.Kill()
	c.Wait()
	if err := Check(data); err != nil {
		t.Errorf("Check() after the payload died = %v, want nil", err)
	}
}

// TestOneLockWhateverPathReachesIt: a second config whose data_dir reaches
// the same directory through another path gets no lock of its own (issue
// 25 item 5: two Executors ran on one data directory): through a symlink
// it finds the same lock, busy; through a bind mount of the directory it
// is refused as a mount point.
func TestOneLockWhateverPathReachesIt(t *testing.T) {
	cases := []struct {
		name    string
		reach   func(t *testing.T, data, other string) // makes other reach data
		wantErr error
	}{
		{"symlink to the data directory", func(t *testing.T, data, other string) {
			if err := os.Symlink(data, other); err != nil {
				t.Fatal(err)
			}
		}, ErrBusy},
		{"bind mount of the data directory", func(t *testing.T, data, other string) {
			if os.Geteuid() != 0 {
				testenv.Missing(t, "needs root to bind-mount")
			}
			if err := os.Mkdir(other, 0o700); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("mount", "--bind", data, other).CombinedOutput(); err != nil {
				testenv.Missing(t, fmt.Sprintf("mount --bind: %v: %s", err, out))
			}
			t.Cleanup(func() {
				if out, err := exec.Command("umount", other).CombinedOutput(); err != nil {
					t.Errorf("umount %s: %v: %s", other, err, out)
				}
			})
		}, ErrMountPoint},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "a", "data")
			if err := os.MkdirAll(data, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(dir, "b"), 0o755); err != nil {
				t.Fatal(err)
			}
			other := filepath.Join(dir, "b", "data")
			c.reach(t, data, other)
			first, err := Acquire(context.Background(), data, Options{Command: "first"})
			if err != nil {
				t.Fatal(err)
			}
			defer first.Release()
			second, err := Acquire(context.Background(), other, Options{Command: "second"})
			if !errors.Is(err, c.wantErr) {
				second.Release()
				t.Fatalf("Acquire(%s) with %s held = %v, want %v", other, data, err, c.wantErr)
			}
			if _, err := os.Stat(filepath.Join(dir, "b", ".data.lock")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a lock of its own was made beside %s: %v", other, err)
			}
		})
	}
}
