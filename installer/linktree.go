package installer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"sort"

	"golang.org/x/sys/unix"
)

// linkTree makes the empty directory dst a copy of the tree src that
// shares its files: regular files and symlinks are hard-linked (the same
// inodes, never opened), directories are made anew with src's modes and
// times (set after their children). It walks with *at calls on handles
// opened with O_NOFOLLOW, in Walk order (sorted names, depth first),
// calling each, when not nil, with every entry's root-relative name and
// what is known of it before linking it: type and inode number, and for
// a directory the whole lstat (files and symlinks are not stat'ed); an
// error from each stops the walk. Errors
// from linkat (EXDEV, EMLINK, EPERM: no hard links here) are returned
// as they are, wrapped.
func linkTree(src, dst string, each func(p string, st *unix.Stat_t) error) error {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("link tree: open %s: %w", src, err)
	}
	s := os.NewFile(uintptr(sfd), src)
	defer s.Close()
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("link tree: open %s: %w", dst, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return fmt.Errorf("link tree: stat %s: %w", src, err)
	}
	l := linker{each: each}
	if err := l.dir(s, dfd, ""); err != nil {
		return fmt.Errorf("link tree: %w", err)
	}
	if err := copyDirMeta(dfd, &st); err != nil {
		return fmt.Errorf("link tree: %w", err)
	}
	return nil
}

type linker struct {
	each func(string, *unix.Stat_t) error
}

// dir links the children of src (root-relative name prefix) into the
// directory open as dfd. Names, types and inode numbers come from
// getdents (readDirents), so a file costs one linkat: only directories
// (and entries of unknown type) are stat'ed.
func (l *linker) dir(src *os.File, dfd int, prefix string) error {
	ents, err := readDirents(int(src.Fd()))
	if err != nil {
		return fmt.Errorf("list %q: %w", prefix, err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].name < ents[j].name })
	sfd := int(src.Fd())
	for _, e := range ents {
		p := e.name
		if prefix != "" {
			p = prefix + "/" + e.name
		}
		var st unix.Stat_t
		st.Ino, st.Mode = e.ino, e.mode
		if e.mode == 0 || e.mode == unix.S_IFDIR {
			if err := unix.Fstatat(sfd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("lstat %q: %w", p, err)
			}
		}
		if l.each != nil {
			if err := l.each(p, &st); err != nil {
				return err
			}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := l.subdir(sfd, dfd, e.name, p, &st); err != nil {
				return err
			}
		case unix.S_IFREG, unix.S_IFLNK:
			if err := unix.Linkat(sfd, e.name, dfd, e.name, 0); err != nil {
				return fmt.Errorf("link %q: %w", p, err)
			}
		default:
			return fmt.Errorf("%q: unexpected file type %#o", p, st.Mode&unix.S_IFMT)
		}
	}
	return nil
}

// dirent is one directory entry as getdents64 gives it: its name, inode
// number and type as S_IFMT bits (0 when the file system does not say).
type dirent struct {
	name string
	ino  uint64
	mode uint32
}

// readDirents lists the directory open as fd (from its start; "." and
// ".." left out) with getdents64 (struct linux_dirent64: d_ino u64, d_off
// s64, d_reclen u16, d_type u8, d_name NUL-terminated).
func readDirents(fd int) ([]dirent, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, err
	}
	var out []dirent
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		for off := 0; off+19 <= n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				return nil, fmt.Errorf("getdents: bad record length %d", reclen)
			}
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				out = append(out, dirent{name: s, ino: binary.NativeEndian.Uint64(buf[off:]), mode: direntMode(buf[off+18])})
			}
			off += reclen
		}
	}
}

// direntMode maps a d_type to S_IFMT bits; 0 for DT_UNKNOWN and types
// linkTree does not link (stat'ed, then refused).
func direntMode(t byte) uint32 {
	switch t {
	case unix.DT_DIR:
		return unix.S_IFDIR
	case unix.DT_REG:
		return unix.S_IFREG
	case unix.DT_LNK:
		return unix.S_IFLNK
	}
	return 0
}

// subdir makes directory n in dfd, links src's n into it, then gives it
// st's mode and times.
func (l *linker) subdir(sfd, dfd int, n, p string, st *unix.Stat_t) error {
	if err := unix.Mkdirat(dfd, n, 0o700); err != nil {
		return fmt.Errorf("mkdir %q: %w", p, err)
	}
	cs, err := unix.Openat(sfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %q: %w", p, err)
	}
	s := os.NewFile(uintptr(cs), p)
	defer s.Close()
	cd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %q: %w", p, err)
	}
	defer unix.Close(cd)
	if err := l.dir(s, cd, p); err != nil {
		return err
	}
	if err := copyDirMeta(cd, st); err != nil {
		return fmt.Errorf("%q: %w", p, err)
	}
	return nil
}

// copyDirMeta gives the directory open as dfd st's permission bits and
// times.
func copyDirMeta(dfd int, st *unix.Stat_t) error {
	if err := unix.Fchmod(dfd, st.Mode&0o7777); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if err := unix.UtimesNanoAt(dfd, ".", []unix.Timespec{st.Atim, st.Mtim}, 0); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}
