package release

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/hermesbox/hbx/internal/fsat"

	"golang.org/x/sys/unix"
)

// Scan lists the tree under rootfs in lexical order (as fs.WalkDir
// visits it: a directory, then its entries sorted by name, depth first).
// hashOf, when not nil, supplies the sha256 of a regular file by inode
// number (hashes taken while the file was written); files it does not
// know, or all files when hashOf is nil, are read and hashed.
func Scan(rootfs string, hashOf func(ino uint64) (string, bool)) ([]File, error) {
	var out []File
	err := Walk(rootfs, hashOf, func(f File) error {
		out = append(out, f)
		return nil
	})
	return out, err
}

// Walk is Scan without the list: emit receives each entry in turn, so
// memory does not grow with the tree. It walks with *at calls on directory
// handles opened from rootfs (O_NOFOLLOW): symlinks are reported, never
// followed, and nothing outside rootfs is read.
func Walk(rootfs string, hashOf func(ino uint64) (string, bool), emit func(File) error) error {
	rfd, err := unix.Open(rootfs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("scan rootfs: %w", err)
	}
	w := &walker{hashOf: hashOf, emit: emit, buf: make([]byte, 1<<20)}
	if err := w.dir(rfd, ""); err != nil {
		return fmt.Errorf("scan rootfs: %w", err)
	}
	return nil
}

type walker struct {
	hashOf func(uint64) (string, bool)
	emit   func(File) error
	buf    []byte
}

// dir lists the directory open as dfd (root-relative name prefix) and
// closes dfd.
func (w *walker) dir(dfd int, prefix string) error {
	defer unix.Close(dfd)
	names, err := fsat.ReadDirNames(dfd)
	if err != nil {
		return fmt.Errorf("list %q: %w", prefix, err)
	}
	sort.Strings(names)
	for _, n := range names {
		p := n
		if prefix != "" {
			p = prefix + "/" + n
		}
		f, err := w.entry(dfd, n, p)
		if err != nil {
			return err
		}
		if err := w.emit(f); err != nil {
			return err
		}
		if f.Type == "dir" {
			cfd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open %q: %w", p, err)
			}
			if err := w.dir(cfd, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// entry is the File of name n (root-relative p) in the directory open as
// dfd: lstat'd, a symlink's target read, a regular file's sha256 from
// hashOf or read.
func (w *walker) entry(dfd int, n, p string) (File, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return File{}, fmt.Errorf("lstat %q: %w", p, err)
	}
	f := File{Path: p, Mode: st.Mode & 0o1777}
	var err error
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		f.Type, f.Mode = "symlink", 0
		if f.Target, err = fsat.Readlink(dfd, n); err != nil {
			return File{}, fmt.Errorf("readlink %q: %w", p, err)
		}
	case unix.S_IFDIR:
		f.Type = "dir"
	case unix.S_IFREG:
		f.Type, f.Size = "file", st.Size
		ok := false
		if w.hashOf != nil {
			f.SHA256, ok = w.hashOf(st.Ino)
		}
		if !ok {
			if f.SHA256, err = w.hashAt(dfd, n); err != nil {
				return File{}, fmt.Errorf("hash %q: %w", p, err)
			}
		}
	default:
		return File{}, fmt.Errorf("%q: unexpected file type %#o", p, st.Mode&unix.S_IFMT)
	}
	return f, nil
}

func (w *walker) hashAt(dfd int, name string) (string, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, w.buf); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Diff compares a recorded file list with a fresh Scan and describes the
// first difference, or returns "" when they agree.
func Diff(recorded, now []File) string {
	byPath := make(map[string]File, len(now))
	for _, f := range now {
		byPath[f.Path] = f
	}
	for _, r := range recorded {
		n, ok := byPath[r.Path]
		if !ok {
			return fmt.Sprintf("%s is missing", r.Path)
		}
		if d := differs(r, n); d != "" {
			return d
		}
		delete(byPath, r.Path)
	}
	for p := range byPath {
		return fmt.Sprintf("%s was not installed", p)
	}
	return ""
}
