package procscan

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// With HBXTEST_PROCSCAN set, the test binary is a holder: it ignores
// SIGTERM unless told "term", prints "ready" and sleeps, holding the files
// it inherited from fd 3 on; told "pin:PATH" it pins PATH first.
func TestMain(m *testing.M) {
	mode := os.Getenv("HBXTEST_PROCSCAN")
	switch {
	case mode == "":
		os.Exit(m.Run())
	case mode == "ignore":
		signal.Ignore(syscall.SIGTERM)
	case strings.HasPrefix(mode, "pin:"):
		if _, err := PinPath(strings.TrimPrefix(mode, "pin:")); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
	}
	fmt.Println("ready")
	time.Sleep(time.Hour)
}

// holder starts a holder of files in a session of its own.
func holder(t *testing.T, mode string, files ...*os.File) *exec.Cmd {
	t.Helper()
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), "HBXTEST_PROCSCAN="+mode)
	c.ExtraFiles = files
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestOpenersAndStop: holders are found by device and inode, also once
// the file is gone (the pin keeps its inode), and Stop escalates to
// SIGKILL only after the wait.
func TestOpenersAndStop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "marker")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	pin, err := PinFile(f)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Close()
	polite, stubborn := holder(t, "term", f), holder(t, "ignore", f)
	f.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	m, err := Openers(pin)
	if err != nil {
		t.Fatal(err)
	}
	if got := m[pin]; len(got) != 2 || got[0].PID != min(polite.Process.Pid, stubborn.Process.Pid) || got[1].PID != max(polite.Process.Pid, stubborn.Process.Pid) {
		t.Fatalf("Openers() = %v, want pids %d and %d", got, polite.Process.Pid, stubborn.Process.Pid)
	}
	go polite.Wait()
	go stubborn.Wait()
	start := time.Now()
	stopped, killed, err := Stop(context.Background(), pin, syscall.SIGTERM, 300*time.Millisecond, 0)
	if err != nil || len(stopped) != 2 || !killed {
		t.Fatalf("Stop() = %v, %v, %v; want both stopped, SIGKILL used", stopped, killed, err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("Stop() took %s, want SIGKILL only after the 300ms wait", took)
	}
	if m, err := Openers(pin); err != nil || len(m[pin]) != 0 {
		t.Errorf("Openers() after Stop = %v, %v; want none", m[pin], err)
	}
}

// TestStopNeverSignalsReusedInode: the marker's holders are gone and the
// file removed; on ext4 the next file created in the directory would get
// the freed inode (issue 25 item 6: Stop signalled a concurrent compile).
// While the pin is open the inode is not freed, so new files get other
// inodes and their holder is neither listed nor signalled; once the pin
// is closed, no scan can be made with it.
func TestStopNeverSignalsReusedInode(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "marker"))
	if err != nil {
		t.Fatal(err)
	}
	pin, err := PinFile(f)
	if err != nil {
		t.Fatal(err)
	}
	old := holder(t, "term", f)
	f.Close()
	os.Remove(f.Name())
	old.Process.Kill()
	old.Wait()
	var later []*os.File
	for i := range 64 {
		g, err := os.Create(filepath.Join(dir, fmt.Sprint("later", i)))
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		if id := idOf(t, g); id == pin.id {
			t.Fatalf("%s got the pinned inode %d while the pin is open", g.Name(), id.ino)
		}
		later = append(later, g)
	}
	bystander := holder(t, "ignore", later...)
	stopped, _, err := Stop(context.Background(), pin, syscall.SIGKILL, 0, 0)
	if err != nil || len(stopped) != 0 {
		t.Fatalf("Stop() = %v, %v; want nothing stopped", stopped, err)
	}
	if !Alive(bystander.Process.Pid) {
		t.Fatal("the holder of later files was killed")
	}
	if err := pin.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Openers(pin); !errors.Is(err, ErrPinClosed) {
		t.Errorf("Openers(closed pin) = %v, want ErrPinClosed", err)
	}
	if _, _, err := Stop(context.Background(), pin, syscall.SIGKILL, 0, 0); !errors.Is(err, ErrPinClosed) {
		t.Errorf("Stop(closed pin) = %v, want ErrPinClosed", err)
	}
	if Holds(bystander.Process.Pid, pin) {
		t.Error("Holds(closed pin) = true")
	}
}

// TestPinIsNotAHolder: another process's pin (an O_PATH descriptor) on
// the file is not a holder, so two scanners never signal each other.
func TestPinIsNotAHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "marker")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pin, err := PinPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Close()
	scanner := holder(t, "pin:"+path)
	m, err := Openers(pin)
	if err != nil || len(m[pin]) != 0 {
		t.Fatalf("Openers() = %v, %v; want none (pid %d only pins it)", m[pin], err, scanner.Process.Pid)
	}
	if _, err := PinPath(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("PinPath(missing) = %v, want os.ErrNotExist", err)
	}
}

func idOf(t *testing.T, f *os.File) fileID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}
}

// TestGroupAliveIgnoresZombies: a group whose only member is a zombie
// (exited, not yet reaped) is gone, though kill(-pgid, 0) still succeeds.
func TestGroupAliveIgnoresZombies(t *testing.T) {
	c := exec.Command("sleep", "60")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := c.Process.Pid
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	if !GroupAlive(pgid) {
		t.Fatalf("GroupAlive(%d) = false with sleep running", pgid)
	}
	c.Process.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for Alive(pgid) {
		if time.Now().After(deadline) {
			t.Fatal("sleep did not die")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := syscall.Kill(-pgid, 0); err != nil {
		t.Fatalf("kill(-%d, 0) = %v, want success on the zombie (the case under test)", pgid, err)
	}
	if GroupAlive(pgid) {
		t.Errorf("GroupAlive(%d) = true with only a zombie left", pgid)
	}
	c.Wait()
	if GroupAlive(pgid) {
		t.Errorf("GroupAlive(%d) = true after the zombie was reaped", pgid)
	}
}
