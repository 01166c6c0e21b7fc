package supervisor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// holdHelper is the "hold" helper: it catches the hold's signals, says so
// (dir/caught), waits for dir/go, then holds on "boom" with the held file
// held and exits 7 when the hold returns it.
func holdHelper(dir, held string) int {
	sigs := CatchHoldSignals()
	if err := os.WriteFile(filepath.Join(dir, "caught"), nil, 0o600); err != nil {
		return 2
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := sigs.Hold(context.Background(), log, held, errors.New("boom")); err == nil || err.Error() != "boom" {
		return 3
	}
	return 7
}

// startHoldHelper starts the "hold" helper on held; it holds once go is
// created (see release).
func startHoldHelper(t *testing.T, held string) (cmd *exec.Cmd, dir string, done chan struct{}) {
	t.Helper()
	dir = t.TempDir()
	cmd = exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "HBXTEST_HELPER=hold", "HBXTEST_DIR="+dir, "HBXTEST_ARG="+held)
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	poll(t, "the helper's signal catch", func() bool { _, err := os.Stat(filepath.Join(dir, "caught")); return err == nil })
	return cmd, dir, done
}

// release lets the hold helper of dir hold.
func release(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// poll waits up to a minute (a loaded machine) for cond.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitExit waits up to a minute for done and returns cmd's exit status
// (-1 when a signal ended it).
func waitExit(t *testing.T, cmd *exec.Cmd, done chan struct{}) int {
	t.Helper()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the hold helper did not exit within a minute")
	}
	return cmd.ProcessState.ExitCode()
}

// TestReadHeld: a held file is live only while a process holds its
// flock: a file naming a live pid (this test's own, pid 1) but not locked
// is stale, whatever pid it names (pids are reused: a container's PID 1
// is pid 1 after every restart); a missing one is not held; a malformed
// one kept by nobody is stale.
func TestReadHeld(t *testing.T) {
	dir := t.TempDir()
	path := HeldPath(filepath.Join(dir, "hbx.sock"))
	if _, _, ok, err := ReadHeld(path); ok || err != nil {
		t.Fatalf("ReadHeld of a missing file = %v, %v; want not held, no error", ok, err)
	}
	for _, pid := range []int{os.Getpid(), 1} {
		if err := os.WriteFile(path, []byte(strconv.Itoa(pid)+"\nold error\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if msg, _, ok, err := ReadHeld(path); ok || err != nil {
			t.Fatalf("ReadHeld of an unlocked file naming live pid %d = %q, %v, %v; want stale (not held)", pid, msg, ok, err)
		}
		if err := CheckHeld(filepath.Join(dir, "hbx.sock")); err != nil {
			t.Fatalf("CheckHeld of an unlocked file naming live pid %d = %v, want nil", pid, err)
		}
	}
	if err := os.WriteFile(path, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := ReadHeld(path); ok || err != nil {
		t.Fatalf("ReadHeld of an unlocked malformed file = %v, %v; want stale", ok, err)
	}
}

// TestHoldLock: a real hold process keeps the held file live (its pid,
// its one-line error, mode 0600); another hold cannot take it over nor a
// start remove it; after kill -9 of the holder the file is still there
// but stale (the kernel dropped the flock) and a start removes it; a hold
// ended by a stop signal removes its file.
func TestHoldLock(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run", "hbx.sock")
	path := HeldPath(sock)
	cmd, dir, done := startHoldHelper(t, path)
	release(t, dir)
	poll(t, "the held file", func() bool { _, _, ok, _ := ReadHeld(path); return ok })
	msg, pid, ok, err := ReadHeld(path)
	if !ok || err != nil || pid != cmd.Process.Pid || msg != "boom" {
		t.Fatalf("ReadHeld = %q, %d, %v, %v; want the holder's pid %d and boom", msg, pid, ok, err, cmd.Process.Pid)
	}
	var he *HeldError
	if err := CheckHeld(sock); !errors.As(err, &he) || !errors.Is(err, ErrHolding) || he.PID != cmd.Process.Pid || he.Msg != "boom" {
		t.Fatalf("CheckHeld = %v, want a HeldError of pid %d with boom", err, cmd.Process.Pid)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("held file: %v, %v; want mode 0600", fi, err)
	}
	if f, err := takeHeld(path, errors.New("second")); err == nil {
		f.Close()
		t.Fatal("takeHeld of a live hold's file succeeded")
	}
	if err := RemoveStaleHeld(path); err != nil {
		t.Fatal(err)
	}
	if msg, _, ok, _ := ReadHeld(path); !ok || msg != "boom" {
		t.Fatalf("after a second hold and RemoveStaleHeld: ReadHeld = %q, %v; want the live hold's boom", msg, ok)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cmd, done)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("held file after kill -9 of its holder: %v; want it left behind", err)
	}
	if _, _, ok, err := ReadHeld(path); ok || err != nil {
		t.Fatalf("ReadHeld after kill -9 of the holder = %v, %v; want stale", ok, err)
	}
	if err := RemoveStaleHeld(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("RemoveStaleHeld left a stale held file: %v", err)
	}

	// A stale file is taken over by the next hold, which removes it when
	// a stop signal ends it.
	if err := os.WriteFile(path, []byte("1\nstale\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, dir, done = startHoldHelper(t, path)
	release(t, dir)
	poll(t, "the second hold", func() bool { _, p, ok, _ := ReadHeld(path); return ok && p == cmd.Process.Pid })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd, done); code != 7 {
		t.Fatalf("hold after SIGTERM exited %d, want 7 (the hold returned its error)", code)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("held file after the hold ended: %v", err)
	}
}

// TestHoldSignalsBeforeHold: signals caught between CatchHoldSignals and
// Hold (the window between a failed start and its hold) do not end the
// process (it exits 7, not by a signal); a HUP there is ignored, a QUIT
// there ends the hold at once with its error.
func TestHoldSignalsBeforeHold(t *testing.T) {
	path := HeldPath(filepath.Join(t.TempDir(), "hbx.sock"))
	cmd, dir, done := startHoldHelper(t, path)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR2, syscall.SIGQUIT} {
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	// Delivered (none pending) before the hold begins.
	poll(t, "the signals' delivery", func() bool { return noPendingSignals(cmd.Process.Pid) || exited(done) })
	release(t, dir)
	if code := waitExit(t, cmd, done); code != 7 {
		t.Fatalf("hold after an early QUIT exited %d (%v), want 7 (the hold returned its error)", code, cmd.ProcessState)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("held file after the hold ended: %v", err)
	}
}

// noPendingSignals reports whether process pid has no signal pending
// (SigPnd and ShdPnd of /proc/<pid>/status are zero).
func noPendingSignals(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if (k == "SigPnd" || k == "ShdPnd") && strings.Trim(strings.TrimSpace(v), "0") != "" {
			return false
		}
	}
	return true
}

// exited reports whether done is closed.
func exited(done chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
