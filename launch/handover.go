package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// handOver gives cred's user what root owns inside dir, once: when dir
// itself is root's and cred is another user's (a box whose Executor ran as
// root under an earlier hbx, now run as executor.user), every entry below
// dir owned by uid 0 becomes cred's uid and gid; dir itself is left to
// ensureDir, which logs its own change. Nothing is followed: the walk goes
// through directory descriptors opened O_NOFOLLOW, and entries change with
// fchownat(AT_SYMLINK_NOFOLLOW); a regular file with more than one link is
// left root's (a hard link root's payload made to a file elsewhere, such
// as /etc/shadow, would be handed over too). It returns one line saying
// what it did, "" when nothing was root's or dir is missing.
func handOver(dir string, cred *syscall.Credential) (string, error) {
	if cred == nil || cred.Uid == 0 {
		return "", nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); errors.Is(err, unix.ENOENT) {
		return "", nil
	} else if err != nil {
		return "", &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if st.Uid != 0 || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", nil
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: dir, Err: err}
	}
	h := handover{uid: int(cred.Uid), gid: int(cred.Gid)}
	if err := h.walk(os.NewFile(uintptr(fd), dir)); err != nil {
		return "", fmt.Errorf("hand %s over to uid %d: %w", dir, cred.Uid, err)
	}
	if h.changed == 0 && h.kept == 0 {
		return "", nil
	}
	line := fmt.Sprintf("%s: %d entries root's -> %d:%d", dir, h.changed, h.uid, h.gid)
	if h.kept > 0 {
		line += fmt.Sprintf("; %d files with more than one link left root's", h.kept)
	}
	return line, nil
}

// handover counts what handOver changed and kept.
type handover struct {
	uid, gid      int
	changed, kept int
}

// walk hands over the root-owned entries of the open directory d, then
// closes it.
func (h *handover) walk(d *os.File) error {
	defer d.Close()
	fd := int(d.Fd())
	for {
		names, err := d.Readdirnames(256)
		for _, n := range names {
			if err := h.entry(fd, n, d.Name()+"/"+n); err != nil {
				return err
			}
		}
		if err == io.EOF || len(names) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", d.Name(), err)
		}
	}
}

// entry hands over name in the directory open as dirfd (shown as p),
// recursing into a directory first.
func (h *handover) entry(dirfd int, name, p string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		cfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: p, Err: err}
		}
		if err := h.walk(os.NewFile(uintptr(cfd), p)); err != nil {
			return err
		}
	}
	if st.Uid != 0 {
		return nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 {
		h.kept++
		return nil
	}
	if err := unix.Fchownat(dirfd, name, h.uid, h.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "chown", Path: p, Err: err}
	}
	h.changed++
	return nil
}
