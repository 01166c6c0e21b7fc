package installer

import (
	"fmt"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/fsat"
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
	defer unix.Close(sfd)
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
	if err := l.dir(sfd, dfd, ""); err != nil {
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

// dir links the children of the directory open as sfd (root-relative
// name prefix) into the directory open as dfd. Names, types and inode
// numbers come from getdents (fsat.ReadDirents), so a file costs one
// linkat: only directories (and entries of unknown type) are stat'ed.
func (l *linker) dir(sfd, dfd int, prefix string) error {
	ents, err := fsat.ReadDirents(sfd)
	if err != nil {
		return fmt.Errorf("list %q: %w", prefix, err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name < ents[j].Name })
	for _, e := range ents {
		p := e.Name
		if prefix != "" {
			p = prefix + "/" + e.Name
		}
		var st unix.Stat_t
		st.Ino, st.Mode = e.Ino, e.Mode
		if e.Mode == 0 || e.Mode == unix.S_IFDIR {
			if err := unix.Fstatat(sfd, e.Name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
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
			if err := l.subdir(sfd, dfd, e.Name, p, &st); err != nil {
				return err
			}
		case unix.S_IFREG, unix.S_IFLNK:
			if err := unix.Linkat(sfd, e.Name, dfd, e.Name, 0); err != nil {
				return fmt.Errorf("link %q: %w", p, err)
			}
		default:
			return fmt.Errorf("%q: unexpected file type %#o", p, st.Mode&unix.S_IFMT)
		}
	}
	return nil
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
	defer unix.Close(cs)
	cd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %q: %w", p, err)
	}
	defer unix.Close(cd)
	if err := l.dir(cs, cd, p); err != nil {
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
