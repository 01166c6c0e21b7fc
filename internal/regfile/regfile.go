// SPDX-License-Identifier: Apache-2.0

// Package regfile opens files an operator names (the config file, env,
// token and passphrase files, backup archives) without blocking on what
// is not a regular file.
//
// open(2) of a FIFO for reading blocks until a writer appears, before any
// fstat can look at it, and a process blocked there is deaf to the
// signals its Go runtime would otherwise turn into a clean exit. [Open]
// opens with O_NONBLOCK, checks the type with fstat on the open
// descriptor (no window between check and use), and refuses FIFOs,
// sockets, devices and directories with [ErrNotRegular]. Symbolic links
// are followed, as the operator expects of a path they name.
package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular: the path names something other than a regular file (a
// FIFO, socket, device or directory).
var ErrNotRegular = errors.New("not a regular file")

// NotRegularError is the error of [Open] and the readers for a path that
// names something other than a regular file: "PATH is WHAT: not a
// regular file", with " (ERRNO)" when open(2) itself refused it. It
// wraps [ErrNotRegular] and Errno.
type NotRegularError struct {
	Path string
	What string // "a FIFO", "a directory", "a socket or device", "a symbolic link", ...
	// Errno is open(2)'s error when it told the type (ENXIO: a socket
	// or device; ELOOP: a symbolic link under OpenNoFollow); nil when
	// fstat did.
	Errno error
}

func (e *NotRegularError) Error() string {
	msg := e.Path + " is " + e.What + ": " + ErrNotRegular.Error()
	if e.Errno != nil {
		msg += " (" + e.Errno.Error() + ")"
	}
	return msg
}

// Unwrap returns ErrNotRegular and Errno (when set).
func (e *NotRegularError) Unwrap() []error {
	if e.Errno == nil {
		return []error{ErrNotRegular}
	}
	return []error{ErrNotRegular, e.Errno}
}

// Open opens path read-only. It never blocks on a FIFO or device: those,
// sockets and directories fail with a [*NotRegularError] naming the path
// and its type. Other errors are those of open(2)
// wrapped in *fs.PathError (errors.Is(err, fs.ErrNotExist) works).
func Open(path string) (*os.File, error) {
	return open(path, 0)
}

// OpenNoFollow is [Open] for a file in a store only hbx writes (a kept
// blob): a symbolic link as the last component is refused too, with an
// error wrapping [ErrNotRegular] (and unix.ELOOP).
func OpenNoFollow(path string) (*os.File, error) {
	f, err := open(path, unix.O_NOFOLLOW)
	if errors.Is(err, unix.ELOOP) {
		return nil, &NotRegularError{Path: path, What: "a symbolic link", Errno: err}
	}
	return f, err
}

func open(path string, flags int) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY|flags, 0)
	if errors.Is(err, unix.ENXIO) { // a socket, or a device without its driver
		return nil, &NotRegularError{Path: path, What: "a socket or device", Errno: err}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &NotRegularError{Path: path, What: typeName(st.Mode)}
	}
	// Regular files ignore O_NONBLOCK; clear it anyway so the descriptor
	// behaves like one os.Open returns.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// ReadFile reads the regular file at path, at most limit bytes (limit <= 0
// means no limit); a longer file is an error naming the limit. Errors are
// those of [Open] and of reading.
func ReadFile(path string, limit int64) ([]byte, error) {
	return readFile(path, limit, 0)
}

// ReadFileNoFollow is [ReadFile] for a file in a directory someone else
// controls (a pidfile in the payload's state directory): a symbolic link
// as the last component fails with ELOOP instead of being followed.
func ReadFileNoFollow(path string, limit int64) ([]byte, error) {
	return readFile(path, limit, unix.O_NOFOLLOW)
}

// ReadPrivate is [ReadFile] for a secret (a key, a token): it also
// returns the file's permission bits, both from the one descriptor it
// opened, so a file swapped between the mode check and the read cannot
// slip through.
func ReadPrivate(path string, limit int64) ([]byte, fs.FileMode, error) {
	f, err := open(path, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	b, err := readAll(f, path, limit)
	if err != nil {
		return nil, 0, err
	}
	return b, st.Mode().Perm(), nil
}

func readFile(path string, limit int64, flags int) ([]byte, error) {
	f, err := open(path, flags)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(f, path, limit)
}

// readAll reads f (named path), at most limit bytes when limit > 0.
func readAll(f *os.File, path string, limit int64) ([]byte, error) {
	var r io.Reader = f
	if limit > 0 {
		r = io.LimitReader(f, limit+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if limit > 0 && int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// Kind names the file type of m for a message: "a regular file", "a
// directory", "a symlink", "a FIFO", "a socket", "a character device",
// "a block device", else "an irregular file".
func Kind(m fs.FileMode) string {
	switch t := m.Type(); {
	case t == 0:
		return "a regular file"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeSymlink != 0:
		return "a symlink"
	case t&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a block device"
	}
	return "an irregular file"
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	}
	return "not a regular file"
}
