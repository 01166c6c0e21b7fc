package release

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// DeriveStats counts what WalkChanged did: entries looked at on disk
// (lstat'd) and entries taken from the earlier list.
type DeriveStats struct {
	Looked, Kept int
}

// WalkChanged is Walk of a tree that was the tree old lists (its
// files.json, in walk order) and has since changed only in the
// directories changed reports (by root-relative name, "" the root; a
// changed directory's ancestors are changed too), without changing any
// inode in place: the tree a release is staged from a layer state, then
// its remaining layers applied (extract.Applier.TrackChanges). It emits
// what Walk would, in Walk's order: the children of a changed directory
// (and of one old does not list as a directory) are lstat'd as Walk does;
// below a directory that did not change, old's entries are emitted as
// they are, not looked at. So it costs what changed, not the tree; an
// entry old gets wrong (a damaged state) is passed on, for Verify to
// report, as a Walk with the same hashOf (which takes the state's hashes)
// passes on the state's content. Errors are Walk's and old's (wrapping
// ErrCorrupt).
func WalkChanged(rootfs string, old *FileList, changed func(dir string) bool, hashOf func(ino uint64) (string, bool), emit func(File) error) (DeriveStats, error) {
	rfd, err := unix.Open(rootfs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return DeriveStats{}, fmt.Errorf("scan rootfs: %w", err)
	}
	m := &merger{walker: walker{hashOf: hashOf, emit: emit, buf: make([]byte, 1<<20)}, old: old, changed: changed}
	if err := m.next(); err != nil {
		unix.Close(rfd)
		return m.stats, err
	}
	if err := m.dir(rfd, ""); err != nil {
		return m.stats, fmt.Errorf("scan rootfs: %w", err)
	}
	return m.stats, nil
}

// merger walks the changed directories of a tree beside its old list.
type merger struct {
	walker
	old     *FileList
	head    File // old's next entry, when more
	more    bool
	changed func(string) bool
	stats   DeriveStats
}

// next reads old's next entry into head.
func (m *merger) next() error {
	var err error
	m.head, m.more, err = m.old.Next()
	return err
}

// skipBefore drops old's entries before p in walk order: names the
// tree no longer holds.
func (m *merger) skipBefore(p string) error {
	for m.more && walkCompare(m.head.Path, p) < 0 {
		if err := m.next(); err != nil {
			return err
		}
	}
	return nil
}

// dir emits the children of the directory open as dfd (root-relative
// name prefix), each lstat'd, and closes dfd.
func (m *merger) dir(dfd int, prefix string) error {
	d := os.NewFile(uintptr(dfd), prefix)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list %q: %w", prefix, err)
	}
	sort.Strings(names)
	for _, n := range names {
		p := n
		if prefix != "" {
			p = prefix + "/" + n
		}
		if err := m.skipBefore(p); err != nil {
			return err
		}
		f, err := m.entry(dfd, n, p)
		if err != nil {
			return err
		}
		m.stats.Looked++
		if err := m.emit(f); err != nil {
			return err
		}
		wasDir := false
		if m.more && m.head.Path == p {
			wasDir = m.head.Type == "dir"
			if err := m.next(); err != nil {
				return err
			}
		}
		if f.Type != "dir" {
			continue
		}
		if err := m.subdir(dfd, n, p, wasDir && !m.changed(p)); err != nil {
			return err
		}
	}
	return nil
}

// subdir emits what is below directory n (root-relative p) of the
// directory open as dfd: old's entries when keep (it did not change),
// else its children looked at.
func (m *merger) subdir(dfd int, n, p string, keep bool) error {
	if keep {
		under := p + "/"
		for m.more && strings.HasPrefix(m.head.Path, under) {
			m.stats.Kept++
			if err := m.emit(m.head); err != nil {
				return err
			}
			if err := m.next(); err != nil {
				return err
			}
		}
		return nil
	}
	cfd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %q: %w", p, err)
	}
	return m.dir(cfd, p)
}
