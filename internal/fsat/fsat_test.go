package fsat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadlink: targets shorter and longer than the first buffer come back
// whole; a name that is not a symlink fails with EINVAL.
func TestReadlink(t *testing.T) {
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, target := range []string{"/run", "a/b", strings.Repeat("x/", 1000) + "end"} {
		if err := os.Remove(filepath.Join(dir, "l")); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, "l")); err != nil {
			t.Fatal(err)
		}
		if got, err := Readlink(int(d.Fd()), "l"); got != target || err != nil {
			t.Errorf("Readlink() = %q (%d bytes), %v; want the %d-byte target", got[:min(len(got), 20)], len(got), err, len(target))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Readlink(int(d.Fd()), "f"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("Readlink(regular file) = %v, want EINVAL", err)
	}
}
