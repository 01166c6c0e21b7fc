package rehearse

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/units"
)

// ErrUnsteady: the data changed during every copy and no hold was
// possible.
var ErrUnsteady = errors.New("the data kept changing while it was copied")

// ErrNoSpace: the copy of the data would not fit beside it with MinFree
// to spare; nothing was copied.
var ErrNoSpace = errors.New("not enough free space for the rehearsal's copy of the data")

// MinFree is what the rehearsal's copy must leave free (bytes) on the
// filesystem that holds it, the data directory's parent's: the live
// programs keep writing their data there while the copy exists, and a
// copy that filled it would make their writes fail.
const MinFree = 64 << 20

// checkRoom refuses, before anything is copied, a copy of src that would
// not leave MinFree free on dir's filesystem. It counts the size of every
// file the copy writes, a sparse file's holes included (the copy writes
// them out); ErrNoSpace says the numbers.
func checkRoom(src, dir string) error {
	root, err := os.OpenRoot(src)
	if err != nil {
		return fmt.Errorf("measure the data: %w", err)
	}
	defer root.Close()
	var size int64
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || skipped(d.Name()) {
			return err
		}
		info, err := d.Info()
		if err == nil {
			size += info.Size()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("measure the data: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("measure the free space: statfs %s: %w", dir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free-size < MinFree {
		return fmt.Errorf("%w: %s holds %s, %s is free beside it and the copy must leave %s",
			ErrNoSpace, src, units.Bytes(size), units.Bytes(free), units.Bytes(MinFree))
	}
	return nil
}

// skipped reports whether name is not copied: SQLite's shared-memory
// index (<db>-shm), which it rebuilds from the WAL when the copy is opened
// first, and which only a live connection's memory makes consistent.
func skipped(name string) bool { return strings.HasSuffix(name, "-shm") }

// fileSum is what a pass read of one regular file: its size and SHA-256.
type fileSum struct {
	size int64
	sum  [sha256.Size]byte
}

// Copied says what one copy held.
type Copied struct {
	Files int
	Bytes int64
}

// copyTree copies src's tree into dst (created), regular files, directories
// and symbolic links with their modes (and owners, when run as root);
// anything else is left out. It reads src through an os.Root: the data
// directory is the payload's, and nothing it swaps in (a link to /root)
// makes the copy read outside it. It returns the sums of the files it
// copied, by path relative to src.
func copyTree(src *os.Root, dst string) (map[string]fileSum, error) {
	sums := map[string]fileSum{}
	err := fs.WalkDir(src.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		to := filepath.Join(dst, filepath.FromSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return copyDir(to, info)
		case d.Type()&fs.ModeSymlink != 0:
			return copyLink(src, rel, dst, to, info)
		case d.Type().IsRegular() && !skipped(d.Name()):
			s, err := copyFile(src, rel, to, info)
			if errors.Is(err, errNotRegular) {
				return nil // swapped since listed: left out, as the next pass will
			}
			sums[rel] = s
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("copy %s: %w", src.Name(), err)
	}
	return sums, nil
}

// copyDir makes to with info's mode and owner.
func copyDir(to string, info fs.FileInfo) error {
	if err := os.Mkdir(to, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := chownLike(to, info, false); err != nil {
		return err
	}
	return os.Chmod(to, info.Mode().Perm())
}

// copyLink makes to a symbolic link with rel's target, retargeted into
// the copy dst when it names the live data directory by absolute path.
func copyLink(src *os.Root, rel, dst, to string, info fs.FileInfo) error {
	target, err := src.Readlink(rel)
	if err != nil {
		return err
	}
	if err := os.Symlink(retarget(target, src.Name(), dst), to); err != nil {
		return err
	}
	return chownLike(to, info, true)
}

// copyFile copies the regular file rel of src to the new file to (never
// through a link at rel), with info's mode and owner, and returns what it
// read.
func copyFile(src *os.Root, rel, to string, info fs.FileInfo) (fileSum, error) {
	beforeOpen(rel)
	in, err := openRegular(src, rel)
	if err != nil {
		return fileSum{}, err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fileSum{}, err
	}
	h := sha256.New()
	// No more than the size checkRoom counted: a file that grew copies
	// short, and the second pass, reading it whole, says the copy torn.
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(in, info.Size()))
	if err == nil {
		err = chownLike(to, info, false)
	}
	if err == nil {
		err = out.Chmod(info.Mode().Perm())
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	var s fileSum
	s.size = n
	copy(s.sum[:], h.Sum(nil))
	return s, err
}

// retarget returns target, a link's in the data directory src, with the
// copy dst in place of src when target is an absolute path inside src
// (as given, or with its symbolic links resolved): the rehearsed release
// follows such a link into its copy, never into the live data it would
// otherwise write (a migration of the live database while the live
// release runs on it). Other targets are kept as they are: a relative
// one resolves inside the copy as it did inside the data.
func retarget(target, src, dst string) string {
	if !filepath.IsAbs(target) {
		return target
	}
	roots := []string{filepath.Clean(src)}
	if real, err := filepath.EvalSymlinks(src); err == nil && real != roots[0] {
		roots = append(roots, real)
	}
	for _, root := range roots {
		rel, err := filepath.Rel(root, filepath.Clean(target))
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return filepath.Join(dst, rel)
		}
	}
	return target
}

// chownLike gives p info's owner when this process may (root); a link
// itself when link.
func chownLike(p string, info fs.FileInfo, link bool) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || os.Geteuid() != 0 {
		return nil
	}
	if link {
		return os.Lchown(p, int(st.Uid), int(st.Gid))
	}
	return os.Chown(p, int(st.Uid), int(st.Gid))
}

// sumTree reads every regular file of src's tree again, as copyTree
// selects them.
func sumTree(src *os.Root) (map[string]fileSum, error) {
	sums := map[string]fileSum{}
	err := fs.WalkDir(src.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || skipped(d.Name()) {
			return err
		}
		f, err := openRegular(src, rel)
		if errors.Is(err, errNotRegular) {
			return nil // swapped since listed: left out, and the sums differ
		}
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		var s fileSum
		s.size = n
		copy(s.sum[:], h.Sum(nil))
		sums[rel] = s
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read %s again: %w", src.Name(), err)
	}
	return sums, nil
}

// errNotRegular: a name listed as a regular file is something else when
// opened (the payload swapped it meanwhile).
var errNotRegular = errors.New("not a regular file")

// openRegular opens the file rel of src for reading if it is a regular
// file, never through a link at rel, and without blocking: a FIFO the
// payload put there in place of a listed file would hold an open for
// reading until a writer came (errNotRegular).
func openRegular(src *os.Root, rel string) (*os.File, error) {
	f, err := src.OpenFile(rel, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s: %w", rel, errNotRegular)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// beforeOpen runs before a copy opens a listed file: a test's stand-in
// for the payload swapping it then.
var beforeOpen = func(rel string) {}

// betweenPasses runs between a snapshot's copy and its second read: a
// test's stand-in for a write the live payload makes then.
var betweenPasses = func() {}

// snapshot copies src into dst (which must not exist) and reads src
// again: steady is true when every file read the same both times (and no
// file came or went), so dst holds src as it stood at one instant. On
// false, dst holds a torn copy the caller removes.
func snapshot(src, dst string) (c Copied, steady bool, err error) {
	root, err := os.OpenRoot(src)
	if err != nil {
		return c, false, fmt.Errorf("copy the data: %w", err)
	}
	defer root.Close()
	first, err := copyTree(root, dst)
	if err != nil {
		return c, false, err
	}
	for _, s := range first {
		c.Files++
		c.Bytes += s.size
	}
	betweenPasses()
	second, err := sumTree(root)
	if err != nil {
		return c, false, err
	}
	return c, maps.Equal(first, second), nil
}
