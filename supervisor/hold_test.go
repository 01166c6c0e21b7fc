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
