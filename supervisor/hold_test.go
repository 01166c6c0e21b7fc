package supervisor

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestReadHeld: a held file of a live process is its error; one whose
// process is gone is stale (not held); a missing one is not held; a
// malformed one is an error.
func TestReadHeld(t *testing.T) {
	dir := t.TempDir()
	path := HeldPath(filepath.Join(dir, "hbx.sock"))
	if _, _, ok, err := ReadHeld(path); ok || err != nil {
		t.Fatalf("ReadHeld of a missing file = %v, %v; want not held, no error", ok, err)
	}
	if err := writeHeld(path, errors.New("supervise: boom\nsecond line")); err != nil {
		t.Fatal(err)
	}
	msg, pid, ok, err := ReadHeld(path)
	if !ok || err != nil || pid != os.Getpid() || msg != "supervise: boom second line" {
		t.Fatalf("ReadHeld = %q, %d, %v, %v; want this pid's one-line error", msg, pid, ok, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("held file: %v, %v; want mode 0600", fi, err)
	}
	// A dead process's file is stale.
	c := exec.Command("/bin/true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(c.Process.Pid)+"\nold\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := ReadHeld(path); ok || err != nil {
		t.Fatalf("ReadHeld of a dead pid's file = %v, %v; want stale (not held)", ok, err)
	}
	if err := os.WriteFile(path, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := ReadHeld(path); err == nil {
		t.Fatal("ReadHeld of a malformed file: no error")
	}
}

// TestRemoveHeld: a hold removes the held file only while it names this
// process, never one a second hbx supervise wrote since.
func TestRemoveHeld(t *testing.T) {
	path := HeldPath(filepath.Join(t.TempDir(), "hbx.sock"))
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	if err := os.WriteFile(path, []byte(strconv.Itoa(other.Process.Pid)+"\nits error\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	removeHeld(path)
	if _, pid, ok, _ := ReadHeld(path); !ok || pid != other.Process.Pid {
		t.Fatalf("removeHeld removed (or spoilt) another live process's held file: ok %v pid %d", ok, pid)
	}
	if err := writeHeld(path, errors.New("mine")); err != nil {
		t.Fatal(err)
	}
	removeHeld(path)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("removeHeld left this process's held file: %v", err)
	}
}
