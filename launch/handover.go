package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/fsat"
)

// handOver gives cred's user what root owns inside dir, once: when dir
// itself is root's and cred is another user's (a box whose Executor ran as
// root under an earlier hbx, now run as executor.user), every entry below
// dir owned by uid 0 becomes cred's uid and gid; dir itself is left to
// ensureDir, which logs its own change. Nothing is followed: the walk goes
// through directory descriptors opened O_NOFOLLOW, and entries change with
// fchownat(AT_SYMLINK_NOFOLLOW). Only directories, regular files and
// symlinks change hands: a regular file with more than one link is left
// root's (a hard link root's payload made to a file elsewhere, such as
// /etc/shadow, would be handed over too), and so is any other type (a
// device node root's payload made, say /dev/mem's 1:1, would give its
// user the device; a FIFO or socket has no data to hand over). Nor does
// the walk cross a mount point: an entry on another mount than dir's (a
// bind mount of another tree into it, another filesystem;
// fsat.OnOtherMount) is left as it is with everything below it. It
// returns one line saying what it did, "" when nothing was root's or dir
// is missing.
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
	d := os.NewFile(uintptr(fd), dir)
	ref, err := fsat.Lstatx(fd, "")
	if err != nil {
		d.Close()
		return "", fmt.Errorf("hand %s over to uid %d: %w", dir, cred.Uid, err)
	}
	h := handover{uid: int(cred.Uid), gid: int(cred.Gid), ref: &ref}
	if err := h.walk(d); err != nil {
		return "", fmt.Errorf("hand %s over to uid %d: %w", dir, cred.Uid, err)
	}
	return h.line(dir), nil
}

// handover counts what handOver changed and kept; ref is the directory
// it started from, whose mount it stays on.
type handover struct {
	uid, gid int
	ref      *unix.Statx_t
	changed  int
	kept     int // regular files with more than one link
	special  int // device nodes, FIFOs, sockets
	mounts   int // mount points not crossed
}

// line says what h did to dir, "" when it neither changed nor kept
// anything.
func (h *handover) line(dir string) string {
	if h.changed == 0 && h.kept == 0 && h.special == 0 && h.mounts == 0 {
		return ""
	}
	line := fmt.Sprintf("%s: %d entries root's -> %d:%d", dir, h.changed, h.uid, h.gid)
	if h.kept > 0 {
		line += fmt.Sprintf("; %d files with more than one link left root's", h.kept)
	}
	if h.special > 0 {
		line += fmt.Sprintf("; %d device nodes, FIFOs or sockets left root's", h.special)
	}
	if h.mounts > 0 {
		line += fmt.Sprintf("; %d mount points not crossed", h.mounts)
	}
	return line
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
// recursing into a directory first; an entry on another mount is left
// alone.
func (h *handover) entry(dirfd int, name, p string) error {
	st, err := fsat.Lstatx(dirfd, name)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if fsat.OnOtherMount(&st, h.ref) {
		h.mounts++
		return nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		crossed, err := h.dir(dirfd, name, p)
		if err != nil || crossed {
			return err
		}
	}
	if st.Uid != 0 {
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR, unix.S_IFLNK:
	case unix.S_IFREG:
		if st.Nlink > 1 {
			h.kept++
			return nil
		}
	default:
		h.special++
		return nil
	}
	if err := unix.Fchownat(dirfd, name, h.uid, h.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "chown", Path: p, Err: err}
	}
	h.changed++
	return nil
}

// dir walks the directory name in the directory open as dirfd (shown as
// p); crossed says it was found on another mount once open (put there
// after entry looked) and left alone.
func (h *handover) dir(dirfd int, name, p string) (crossed bool, err error) {
	cfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, &os.PathError{Op: "open", Path: p, Err: err}
	}
	d := os.NewFile(uintptr(cfd), p)
	st, err := fsat.Lstatx(cfd, "")
	if err != nil {
		d.Close()
		return false, fmt.Errorf("%s: %w", p, err)
	}
	if fsat.OnOtherMount(&st, h.ref) {
		d.Close()
		h.mounts++
		return true, nil
	}
	return false, h.walk(d)
}
