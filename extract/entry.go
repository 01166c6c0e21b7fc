package extract

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"unsafe"

	"golang.org/x/sys/unix"
)

// entry applies one tar entry: within the limits, a whiteout or aufs
// marker, or an entry that creates its path (see create).
func (a *Applier) entry(tr *tar.Reader, hdr *tar.Header) error {
	if err := a.count(hdr); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	p, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	dir, leaf := splitName(p)
	if done, err := a.marker(p, dir, leaf, hdr); done || err != nil {
		return err
	}

	// Layer bookkeeping uses canonical names: an alias through a symlink
	// is the same path.
	canon := ""
	if p != "" {
		_, cdir, err := a.parent(dir)
		if err != nil {
			return err
		}
		canon = path.Join(cdir, leaf)
		a.touch(canon) // and so cdir: a name made anew may be a directory made anew
	}
	a.markLayerPath(canon)
	if p == "" {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("%w: the root may only be a directory", ErrUnsafePath)
		}
		return a.rootDir(hdr)
	}
	return a.create(tr, canon, dir, leaf, a.entryMode(p, hdr), hdr)
}

// count counts the entry against Options.MaxEntries, MaxPathLen and
// MaxBytes: the bytes left in the stream and, since a sparse file's holes
// cost no input but fill the disk, the claimed sizes of all files.
func (a *Applier) count(hdr *tar.Header) error {
	a.stats.Entries++
	if a.stats.Entries > a.opts.MaxEntries {
		return fmt.Errorf("%w: more than %d entries", ErrLimit, a.opts.MaxEntries)
	}
	if len(hdr.Name) > a.opts.MaxPathLen || len(hdr.Linkname) > a.opts.MaxPathLen {
		return fmt.Errorf("%w: name longer than %d bytes", ErrLimit, a.opts.MaxPathLen)
	}
	if max := a.opts.MaxBytes; max > 0 && hdr.Size > max-a.stats.Bytes {
		return fmt.Errorf("%w: entry claims %d bytes, %d left of %d", ErrTooLarge, hdr.Size, max-a.stats.Bytes, max)
	}
	if max := a.opts.MaxBytes; max > 0 && hdr.Size > max-a.logical {
		return fmt.Errorf("%w: files claim more than %d bytes in all", ErrTooLarge, max)
	}
	if hdr.Size > 0 {
		a.logical += hdr.Size
	}
	return nil
}

// entryMode is the permission bits the entry's path gets: setuid and
// setgid dropped (and reported) but on links, RuntimeMode applied with
// Options.RuntimeModes.
func (a *Applier) entryMode(p string, hdr *tar.Header) uint32 {
	mode := uint32(hdr.Mode) & 0o7777
	if mode&(unix.S_ISUID|unix.S_ISGID) != 0 && hdr.Typeflag != tar.TypeSymlink && hdr.Typeflag != tar.TypeLink {
		mode &^= unix.S_ISUID | unix.S_ISGID
		a.stats.DroppedSetid = append(a.stats.DroppedSetid, p)
		a.log.Warn("dropped setuid/setgid bits", "entry", p)
	}
	if a.opts.RuntimeModes {
		mode = RuntimeMode(mode)
	}
	return mode
}

// create makes the entry's path by its type; devices, fifos and unknown
// types are refused.
func (a *Applier) create(tr *tar.Reader, canon, dir, leaf string, mode uint32, hdr *tar.Header) error {
	switch hdr.Typeflag {
	case tar.TypeDir:
		return a.mkdir(canon, dir, leaf, mode, hdr)
	case tar.TypeReg, tar.TypeRegA, tar.TypeCont, tar.TypeGNUSparse: //nolint:staticcheck // old archives still use '\x00'
		return a.file(tr, dir, leaf, mode, hdr)
	case tar.TypeSymlink:
		return a.symlink(dir, leaf, hdr)
	case tar.TypeLink:
		return a.hardlink(dir, leaf, hdr)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("%w: device or fifo (type %q)", ErrUnsupportedType, hdr.Typeflag)
	default:
		return fmt.Errorf("%w: type %q", ErrUnsupportedType, hdr.Typeflag)
	}
}

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

// file writes a regular file: created with its final mode (0600 when
// owners are preserved, until fileMeta), its content copied, then one
// fstat (the inode for its hash, the mode the umask left), its owner, mode
// when that differs, xattrs and hash, its times set on the descriptor,
// closed. A file costs openat, write, fstat, utimensat and close on the
// common path.
func (a *Applier) file(tr io.Reader, dir, leaf string, mode uint32, hdr *tar.Header) error {
	d, _, err := a.parent(dir)
	if err != nil {
		return err
	}
	create := uint32(0o600)
	if !a.opts.PreserveOwners {
		create = mode & 0o777
	}
	f, err := a.createFile(d, leaf, create)
	if err != nil {
		return err
	}
	c, err := a.writeContent(f, tr, hdr)
	var st unix.Stat_t
	if err == nil {
		if err = unix.Fstat(f.fd, &st); err != nil {
			err = fmt.Errorf("stat: %w", err)
		}
	}
	if err == nil {
		err = a.fileMeta(f.fd, mode, st.Mode, hdr)
	}
	if err == nil && a.opts.HashFiles {
		a.recordHash(st.Ino, c)
		c.small = nil // submitted
	}
	if err == nil {
		err = f.setTimes(hdr)
	}
	if err != nil {
		if c.small != nil { // not submitted: this entry failed
			a.hasher.release(c.small)
		}
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// regFile is a regular file being written, as a bare descriptor: an
// *os.File would cost an fcntl per file in os.NewFile and a trip through
// the poller on each write and on close, for thousands of files.
type regFile struct {
	fd int
}

// Write writes all of p at the file offset, retrying EINTR and short
// writes, as os.File.Write does.
func (f regFile) Write(p []byte) (int, error) {
	return writeAll(p, func(b []byte, _ int) (int, error) { return unix.Write(f.fd, b) })
}

// WriteAt writes all of p at offset off (pwrite), as os.File.WriteAt does.
func (f regFile) WriteAt(p []byte, off int64) (int, error) {
	return writeAll(p, func(b []byte, done int) (int, error) { return unix.Pwrite(f.fd, b, off+int64(done)) })
}

// writeAll calls write with what of p is left and how much is done until
// all of p is written, retrying EINTR; a write of nothing is
// io.ErrShortWrite.
func writeAll(p []byte, write func(b []byte, done int) (int, error)) (int, error) {
	n := 0
	for n < len(p) {
		m, err := write(p[n:], n)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.ErrShortWrite
		}
		n += m
	}
	return n, nil
}

// setTimes gives the file the entry's atime and mtime through its
// descriptor (utimensat with a NULL path: futimens), so no name is looked
// up again. Setting them before close is as final as after: close does not
// change a file's times.
func (f regFile) setTimes(hdr *tar.Header) error {
	ts, err := timespecs(hdr.AccessTime, hdr.ModTime)
	if err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(f.fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("set times: %w", errno)
	}
	return nil
}

// Close closes the descriptor (EINTR is not retried: on Linux the
// descriptor is gone whatever close returns).
func (f regFile) Close() error { return unix.Close(f.fd) }

// createFile makes leaf in d a new empty file of mode perm (less the
// umask). It creates first and only when something is in the way removes
// it and retries (one syscall less per file on the common path: a fresh
// name).
func (a *Applier) createFile(d *os.File, leaf string, perm uint32) (regFile, error) {
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	ffd, err := unix.Openat(fd(d), leaf, flags, perm)
	if errors.Is(err, unix.EEXIST) {
		if err := a.remove(d, leaf); err != nil {
			return regFile{}, err
		}
		ffd, err = unix.Openat(fd(d), leaf, flags, perm)
	}
	if err != nil {
		return regFile{}, fmt.Errorf("create: %w", err)
	}
	return regFile{fd: ffd}, nil
}

// content is what writeContent kept for the file's hash (with
// Options.HashFiles): the whole of a small file, hashed off this
// goroutine, or the running sha256 of a larger one.
type content struct {
	small []byte    // from the hasher's buffers; released or submitted by the caller
	h     hash.Hash // larger files
}

// writeContent copies the entry's hdr.Size bytes into f; a short entry is
// io.ErrUnexpectedEOF. A sparse entry's all-zero blocks are left as holes
// (holeWriter) and its size set by truncate.
func (a *Applier) writeContent(f regFile, tr io.Reader, hdr *tar.Header) (c content, err error) {
	var out io.Writer = f
	var holes *holeWriter
	if isSparse(hdr) {
		holes = &holeWriter{f: f}
		out = holes
	}
	var n int64
	if a.opts.HashFiles && hdr.Size <= hashInBackground {
		c.small = a.hasher.buffer(int(hdr.Size))
		var rn int
		rn, err = io.ReadFull(tr, c.small)
		n = int64(rn)
		if err == nil {
			_, err = out.Write(c.small)
		}
	} else {
		if a.opts.HashFiles {
			c.h = sha256.New()
			out = io.MultiWriter(out, c.h)
		}
		n, err = io.CopyBuffer(out, tr, a.buf)
	}
	if err == nil && n != hdr.Size {
		err = io.ErrUnexpectedEOF
	}
	if err == nil && holes != nil {
		err = holes.finish(hdr.Size)
	}
	if err != nil {
		return c, fmt.Errorf("write: %w", err)
	}
	return c, nil
}

// fileMeta gives the file open as ffd, created with mode have (as fstat
// read it), the entry's owner (Options.PreserveOwners, then its mode
// always: a chown may clear bits), its mode when have differs (the umask
// took bits, or sticky), and its xattrs.
func (a *Applier) fileMeta(ffd int, mode, have uint32, hdr *tar.Header) error {
	if a.opts.PreserveOwners {
		if err := unix.Fchown(ffd, hdr.Uid, hdr.Gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if a.opts.PreserveOwners || have&0o7777 != mode {
		if err := unix.Fchmod(ffd, mode); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	return a.setXattrs(ffd, hdr)
}

// recordHash records the file's sha256 under its inode: a small file's
// content goes to the hasher, a larger one's sum is set.
func (a *Applier) recordHash(ino uint64, c content) {
	if c.small != nil {
		a.hasher.submit(ino, c.small)
	} else {
		a.hasher.set(ino, c.h.Sum(nil))
	}
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
