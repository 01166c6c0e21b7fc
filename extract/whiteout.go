package extract

import (
	"archive/tar"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// markLayerPath records p as created by this layer and its parents as
// passed through (unless created themselves).
func (a *Applier) markLayerPath(p string) {
	a.paths.set(a.key(p), true)
	for d, _ := splitName(p); d != ""; d, _ = splitName(d) {
		k := a.key(d)
		if a.paths.inMemory(k) {
			break // and so its parents
		}
		a.paths.set(k, false)
	}
}

// pathKey stands for a canonical name in the layer's pathSet: two independently
// seeded 64-bit hashes, 16 bytes whatever the name's length, so the map
// costs the same per entry for deep trees. The seeds are random per
// Applier, so a layer cannot be built to make two names collide; by
// chance, two of n names collide with probability about n²/2¹²⁹.
type pathKey [2]uint64

func (a *Applier) key(name string) pathKey {
	return pathKey{maphash.String(a.pathSeeds[0], name), maphash.String(a.pathSeeds[1], name)}
}

// lstatAt stats leaf in dir without following it. ok is false when absent.
func lstatAt(dir *os.File, leaf string) (st unix.Stat_t, ok bool, err error) {
	err = unix.Fstatat(fd(dir), leaf, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("lstat: %w", err)
	}
	return st, true, nil
}

// remove deletes leaf in dir, recursively for directories, never following
// symlinks. Absence is not an error.
func (a *Applier) remove(dir *os.File, leaf string) error {
	a.invalidate()
	return removeAllAt(fd(dir), leaf)
}

func removeAllAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("remove %q: %w", name, err)
	}
	cfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %q for removal: %w", name, err)
	}
	d := os.NewFile(uintptr(cfd), name)
	defer d.Close()
	// A read-only directory cannot lose children for a non-root user.
	_ = unix.Fchmod(cfd, 0o700)
	for {
		names, err := d.Readdirnames(256)
		for _, n := range names {
			if err := removeAllAt(cfd, n); err != nil {
				return err
			}
		}
		if err == io.EOF || len(names) == 0 {
			break
		}
		if err != nil {
			return fmt.Errorf("list %q: %w", name, err)
		}
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove directory %q: %w", name, err)
	}
	return nil
}

// marker applies the entry when it is an OCI whiteout or opaque whiteout,
// or skips it when a component of its name is other aufs metadata
// (".wh..wh.*"); done reports that the entry was one of these. With
// Options.Literal nothing is a marker.
func (a *Applier) marker(p, dir, leaf string, hdr *tar.Header) (done bool, err error) {
	if a.opts.Literal {
		return false, nil
	}
	for _, c := range strings.Split(p, "/") {
		if strings.HasPrefix(c, whiteoutMeta) && !(c == whiteoutOpaque && c == leaf) {
			a.log.Debug("skip aufs metadata", "entry", hdr.Name)
			return true, nil
		}
	}
	if leaf == whiteoutOpaque {
		a.stats.Whiteouts++
		return true, a.opaque(dir)
	}
	if strings.HasPrefix(leaf, whiteoutPrefix) {
		name := strings.TrimPrefix(leaf, whiteoutPrefix)
		if name == "" || name == "." || name == ".." {
			return true, ErrBadWhiteout
		}
		a.stats.Whiteouts++
		return true, a.whiteout(dir, name)
	}
	return false, nil
}

// whiteout removes dir/leaf as left by lower layers.
func (a *Applier) whiteout(dir, leaf string) error {
	d, cdir, err := a.lookupDir(dir)
	if err != nil || d == nil {
		return err
	}
	a.touch(cdir)
	p := path.Join(cdir, leaf)
	present, created, err := a.paths.lookup(a.key(p))
	switch {
	case err != nil:
		return err
	case created:
		return nil // created by this layer: whiteouts only hide lower layers
	case present:
		// p holds entries of this layer below it: hide only lower content.
		return a.clearLower(d, leaf, p)
	}
	return a.remove(d, leaf)
}

// opaque hides every lower-layer child of dir.
func (a *Applier) opaque(dir string) error {
	d, cdir, err := a.lookupDir(dir)
	if err != nil || d == nil {
		return err
	}
	a.markLayerPath(cdir)
	return a.clearChildren(d, cdir)
}

// clearLower empties leaf (a directory in parent d) of lower-layer content.
func (a *Applier) clearLower(d *os.File, leaf, p string) error {
	st, ok, err := lstatAt(d, leaf)
	if err != nil || !ok {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	cfd, err := unix.Openat(fd(d), leaf, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %q: %w", p, err)
	}
	c := os.NewFile(uintptr(cfd), p)
	defer c.Close()
	return a.clearChildren(c, p)
}

// clearChildren removes the children of directory d (root-relative name p)
// that this layer did not create, recursing into those it passed through.
func (a *Applier) clearChildren(d *os.File, p string) error {
	a.touch(p)
	if _, err := d.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewind %q: %w", p, err)
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list %q: %w", p, err)
	}
	if _, err := d.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewind %q: %w", p, err)
	}
	for _, n := range names {
		child := path.Join(p, n)
		inLayer, _, err := a.paths.lookup(a.key(child))
		if err != nil {
			return err
		}
		if !inLayer {
			if err := a.remove(d, n); err != nil {
				return err
			}
			continue
		}
		// Created or passed through by this layer: keep it, but hide what
		// lower layers left inside it.
		if err := a.clearLower(d, n, child); err != nil {
			return err
		}
	}
	return nil
}
