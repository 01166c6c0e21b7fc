package extract

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

func (a *Applier) rootDir(hdr *tar.Header) error {
	mode := uint32(hdr.Mode) & 0o7777 &^ (unix.S_ISUID | unix.S_ISGID)
	if a.opts.RuntimeModes {
		mode = RuntimeMode(mode)
	}
	if err := a.chown(a.root, "", hdr); err != nil {
		return err
	}
	if err := a.setXattrs(fd(a.root), hdr); err != nil {
		return err
	}
	a.addDirMeta(dirMeta{name: "", mode: mode, atime: hdr.AccessTime, mtime: hdr.ModTime})
	return nil
}

func (a *Applier) mkdir(p, dir, leaf string, mode uint32, hdr *tar.Header) error {
	d, _, err := a.parent(dir)
	if err != nil {
		return err
	}
	st, ok, err := lstatAt(d, leaf)
	if err != nil {
		return err
	}
	if ok && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := a.remove(d, leaf); err != nil {
			return err
		}
		ok = false
	}
	if !ok {
		// Owner rwx until the layer ends, so children can be created.
		if err := unix.Mkdirat(fd(d), leaf, 0o700); err != nil {
			return fmt.Errorf("mkdir: %w", err)
		}
	}
	if err := a.chown(d, leaf, hdr); err != nil {
		return err
	}
	if a.opts.Xattrs && hasXattrs(hdr) {
		cfd, err := unix.Openat(fd(d), leaf, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open for xattrs: %w", err)
		}
		err = a.setXattrs(cfd, hdr)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	a.addDirMeta(dirMeta{name: p, mode: mode, atime: hdr.AccessTime, mtime: hdr.ModTime})
	return nil
}

func (a *Applier) file(tr io.Reader, dir, leaf string, mode uint32, hdr *tar.Header) error {
	d, _, err := a.parent(dir)
	if err != nil {
		return err
	}
	// Create first; only when something is in the way, remove it and retry
	// (one syscall less per file on the common path: a fresh name).
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	ffd, err := unix.Openat(fd(d), leaf, flags, 0o600)
	if errors.Is(err, unix.EEXIST) {
		if err := a.remove(d, leaf); err != nil {
			return err
		}
		ffd, err = unix.Openat(fd(d), leaf, flags, 0o600)
	}
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	f := os.NewFile(uintptr(ffd), leaf)
	var small []byte // whole content of a small file, hashed off this goroutine
	var h hash.Hash
	var n int64
	if a.opts.HashFiles && hdr.Size <= hashInBackground {
		small = a.hasher.buffer(int(hdr.Size))
		defer func() {
			if small != nil { // not submitted: this entry failed
				a.hasher.release(small)
			}
		}()
		var rn int
		rn, err = io.ReadFull(tr, small)
		n = int64(rn)
		if err == nil {
			_, err = f.Write(small)
		}
	} else {
		var w io.Writer = f
		if a.opts.HashFiles {
			h = sha256.New()
			w = io.MultiWriter(f, h)
		}
		n, err = io.CopyBuffer(w, tr, a.buf)
	}
	if err == nil && n != hdr.Size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("write: %w", err)
	}
	if a.opts.PreserveOwners {
		if err := unix.Fchown(ffd, hdr.Uid, hdr.Gid); err != nil {
			f.Close()
			return fmt.Errorf("chown: %w", err)
		}
	}
	if err := unix.Fchmod(ffd, mode); err != nil {
		f.Close()
		return fmt.Errorf("chmod: %w", err)
	}
	if err := a.setXattrs(ffd, hdr); err != nil {
		f.Close()
		return err
	}
	if a.opts.HashFiles {
		var st unix.Stat_t
		if err := unix.Fstat(ffd, &st); err != nil {
			f.Close()
			return fmt.Errorf("stat: %w", err)
		}
		if small != nil {
			a.hasher.submit(st.Ino, small)
			small = nil
		} else {
			a.hasher.set(st.Ino, h.Sum(nil))
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return setTimes(d, leaf, hdr)
}

func (a *Applier) symlink(dir, leaf string, hdr *tar.Header) error {
	d, _, err := a.parent(dir)
	if err != nil {
		return err
	}
	if _, ok, err := lstatAt(d, leaf); err != nil {
		return err
	} else if ok {
		if err := a.remove(d, leaf); err != nil {
			return err
		}
	}
	if err := unix.Symlinkat(hdr.Linkname, fd(d), leaf); err != nil {
		return fmt.Errorf("symlink: %w", err)
	}
	if err := a.chown(d, leaf, hdr); err != nil {
		return err
	}
	return setTimes(d, leaf, hdr)
}

func (a *Applier) hardlink(dir, leaf string, hdr *tar.Header) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("link target %q: %w", hdr.Linkname, err)
	}
	if target == "" {
		return fmt.Errorf("%w: link target %q is the root", ErrBadLink, hdr.Linkname)
	}
	tdir, tleaf := splitName(target)
	td, _, err := a.lookupDir(tdir)
	if err != nil {
		return err
	}
	if td == nil {
		return fmt.Errorf("%w: link target %q does not exist", ErrBadLink, hdr.Linkname)
	}
	tst, ok, err := lstatAt(td, tleaf)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: link target %q does not exist", ErrBadLink, hdr.Linkname)
	}
	if tst.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("%w: link target %q is a directory", ErrBadLink, hdr.Linkname)
	}
	d, _, err := a.parent(dir)
	if err != nil {
		return err
	}
	if st, ok, err := lstatAt(d, leaf); err != nil {
		return err
	} else if ok {
		if st.Dev == tst.Dev && st.Ino == tst.Ino {
			return nil // already that file
		}
		if err := a.remove(d, leaf); err != nil {
			return err
		}
	}
	if err := unix.Linkat(fd(td), tleaf, fd(d), leaf, 0); err != nil {
		return fmt.Errorf("link to %q: %w", hdr.Linkname, err)
	}
	return nil
}

// chown applies the entry's numeric owner to leaf in d (or d itself when
// leaf is ""), without following symlinks.
func (a *Applier) chown(d *os.File, leaf string, hdr *tar.Header) error {
	if !a.opts.PreserveOwners {
		return nil
	}
	var err error
	if leaf == "" {
		err = unix.Fchown(fd(d), hdr.Uid, hdr.Gid)
	} else {
		err = unix.Fchownat(fd(d), leaf, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	return nil
}
