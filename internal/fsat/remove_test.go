package fsat

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestEmptyDir: everything inside goes (files, nested and read-only
// directories, symlinks), the directory stays, and a symlink inside is
// removed, never followed: what it points to is untouched.
func TestEmptyDir(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep")
	mustWrite(t, keep)
	tmp := filepath.Join(dir, "tmp")
	for _, d := range []string{"tmp/a/b", "tmp/ro/x"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(tmp, "f"))
	mustWrite(t, filepath.Join(tmp, "a/b/g"))
	if err := os.Chmod(filepath.Join(tmp, "ro"), 0o500); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"tmp/link": outside, "tmp/a/keep": keep} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 600 { // more than one Readdirnames batch
		mustWrite(t, filepath.Join(tmp, "a", "n"+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	if err := EmptyDir(unix.AT_FDCWD, tmp); err != nil {
		t.Fatalf("EmptyDir() = %v", err)
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
		t.Errorf("ReadDir(tmp) after EmptyDir = %v, %v; want empty", left, err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("Stat(target of a symlink inside) = %v; want it untouched", err)
	}
}

// TestEmptyDirRefusesSymlink: a symlink in the directory's place is
// refused (ELOOP or ENOTDIR), and what it points to keeps its entries;
// a missing directory is an error.
func TestEmptyDirRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := t.TempDir()
	mustWrite(t, filepath.Join(target, "f"))
	if err := os.Symlink(target, filepath.Join(dir, "tmp")); err != nil {
		t.Fatal(err)
	}
	err := EmptyDir(unix.AT_FDCWD, filepath.Join(dir, "tmp"))
	if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("EmptyDir(symlink) = %v, want ELOOP or ENOTDIR", err)
	}
	if _, err := os.Stat(filepath.Join(target, "f")); err != nil {
		t.Errorf("Stat(file behind the symlink) = %v; want it untouched", err)
	}
	if err := EmptyDir(unix.AT_FDCWD, filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("EmptyDir(missing) = %v, want ErrNotExist", err)
	}
}

func mustWrite(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
}
