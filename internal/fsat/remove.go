package fsat

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// EmptyDir removes everything inside the directory name of dirfd (a path
// relative to dirfd, or absolute with unix.AT_FDCWD), keeping the
// directory itself, so a mount point can be emptied too. name itself is
// opened with O_NOFOLLOW (a symlink in its place fails with ELOOP or
// ENOTDIR); below it nothing is followed: each entry is unlinked through
// its parent's descriptor, and a directory is opened O_NOFOLLOW from its
// parent's before its own entries go (RemoveAllAt), so a process that
// swaps an entry for a symlink meanwhile gets that link removed, never
// what it points to. Nor does it cross a mount point: a directory below
// name on another mount than name's own (a bind mount of another tree
// into it, another filesystem) is refused with ErrOtherMount before
// anything in it goes, and the walk stops there (entries listed before it
// are gone); a file bind-mounted onto an entry fails with EBUSY. Absence
// of name is an error.
func EmptyDir(dirfd int, name string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: name, Err: err}
	}
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	ref, err := Lstatx(fd, "")
	if err != nil {
		return err
	}
	return removeEntries(d, &ref)
}

// RemoveAllAt removes name in the directory open as dirfd, recursively
// for a directory, never following a symlink nor crossing a mount point
// below name (see EmptyDir; name itself may be a mount point of dirfd's
// mount). Absence is not an error.
func RemoveAllAt(dirfd int, name string) error {
	ref, err := Lstatx(dirfd, name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	return removeAt(dirfd, name, &ref)
}

// removeAt is RemoveAllAt below a walk that started on the mount of ref:
// a directory on another mount is refused with ErrOtherMount.
func removeAt(dirfd int, name string, ref *unix.Statx_t) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return &os.PathError{Op: "remove", Path: name, Err: err}
	}
	cfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: name, Err: err}
	}
	d := os.NewFile(uintptr(cfd), name)
	defer d.Close()
	st, err := Lstatx(cfd, "")
	if err != nil {
		return err
	}
	if OnOtherMount(&st, ref) {
		return &os.PathError{Op: "remove", Path: name, Err: ErrOtherMount}
	}
	// A directory without write permission cannot lose its entries for
	// a user other than root.
	_ = unix.Fchmod(cfd, 0o700)
	if err := removeEntries(d, ref); err != nil {
		return err
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove", Path: name, Err: err}
	}
	return nil
}

// removeEntries removes every entry of the open directory d (RemoveAllAt),
// listing it again from the start until a listing is empty: a directory
// listed while its entries go may skip some on some filesystems. A
// directory on another mount than ref's is refused (ErrOtherMount).
func removeEntries(d *os.File, ref *unix.Statx_t) error {
	for {
		if _, err := d.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("list %s: %w", d.Name(), err)
		}
		removed := 0
		for {
			names, err := d.Readdirnames(256)
			for _, n := range names {
				if err := removeAt(int(d.Fd()), n, ref); err != nil {
					return fmt.Errorf("%s: %w", d.Name(), err)
				}
			}
			removed += len(names)
			if err == io.EOF || len(names) == 0 {
				break
			}
			if err != nil {
				return fmt.Errorf("list %s: %w", d.Name(), err)
			}
		}
		if removed == 0 {
			return nil
		}
	}
}
