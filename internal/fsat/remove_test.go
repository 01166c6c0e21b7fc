package fsat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/testenv"
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

// TestEmptyDirRefusesMountPoints: a directory below on another mount (a
// bind mount of another tree on the same filesystem, a tmpfs) is refused
// with ErrOtherMount and nothing in it goes; the mount point itself stays.
// EmptyDir of a mount point itself still empties it.
func TestEmptyDirRefusesMountPoints(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to mount")
	}
	for _, tc := range []struct {
		name  string
		mount func(src, dst string) error
	}{
		{"bind mount", func(src, dst string) error { return unix.Mount(src, dst, "", unix.MS_BIND, "") }},
		{"tmpfs", func(_, dst string) error { return unix.Mount("tmpfs", dst, "tmpfs", 0, "mode=0700") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp, victim := t.TempDir(), t.TempDir()
			mnt := filepath.Join(tmp, "a", "mnt")
			if err := os.MkdirAll(mnt, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := tc.mount(victim, mnt); err != nil {
				testenv.Missing(t, fmt.Sprintf("mount: %v (no mount privilege here)", err))
			}
			t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
			secret := filepath.Join(mnt, "d", "secret")
			if err := os.Mkdir(filepath.Dir(secret), 0o700); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, secret)
			if err := EmptyDir(unix.AT_FDCWD, tmp); !errors.Is(err, ErrOtherMount) {
				t.Errorf("EmptyDir(dir with a mount point below) = %v, want ErrOtherMount", err)
			}
			if _, err := os.Stat(secret); err != nil {
				t.Errorf("Stat(file on the other mount) = %v; want it untouched", err)
			}
			if err := EmptyDir(unix.AT_FDCWD, mnt); err != nil {
				t.Errorf("EmptyDir(the mount point itself) = %v", err)
			}
			if left, err := os.ReadDir(mnt); err != nil || len(left) != 0 {
				t.Errorf("ReadDir(mount point) after EmptyDir = %v, %v; want empty", left, err)
			}
		})
	}
}
