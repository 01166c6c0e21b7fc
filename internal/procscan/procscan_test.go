package procscan

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// With HBXTEST_PROCSCAN set, the test binary is a holder: it ignores
// SIGTERM unless told "term", prints "ready" and sleeps, holding the file
// it inherited as fd 3.
func TestMain(m *testing.M) {
	switch os.Getenv("HBXTEST_PROCSCAN") {
	case "":
		os.Exit(m.Run())
	case "ignore":
		signal.Ignore(syscall.SIGTERM)
	}
	fmt.Println("ready")
	time.Sleep(time.Hour)
}

// holder starts a holder of f in a session of its own.
func holder(t *testing.T, f *os.File, mode string) *exec.Cmd {
	t.Helper()
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), "HBXTEST_PROCSCAN="+mode)
	c.ExtraFiles = []*os.File{f}
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

func TestOpenersAndStop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "marker")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	id, err := IDOf(f)
	if err != nil {
		t.Fatal(err)
	}
	polite, stubborn := holder(t, f, "term"), holder(t, f, "ignore")
	f.Close()
	// Found by device and inode, also once the file is gone.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	m, err := Openers(id)
	if err != nil {
		t.Fatal(err)
	}
	if got := m[id]; len(got) != 2 || got[0].PID != min(polite.Process.Pid, stubborn.Process.Pid) || got[1].PID != max(polite.Process.Pid, stubborn.Process.Pid) {
		t.Fatalf("Openers() = %v, want pids %d and %d", got, polite.Process.Pid, stubborn.Process.Pid)
	}
	go polite.Wait()
	go stubborn.Wait()
	start := time.Now()
	stopped, killed, err := Stop(context.Background(), id, syscall.SIGTERM, 300*time.Millisecond, 0)
	if err != nil || len(stopped) != 2 || !killed {
		t.Fatalf("Stop() = %v, %v, %v; want both stopped, SIGKILL used", stopped, killed, err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("Stop() took %s, want SIGKILL only after the 300ms wait", took)
	}
	if m, _ := Openers(id); len(m[id]) != 0 {
		t.Errorf("Openers() after Stop = %v", m[id])
	}
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
