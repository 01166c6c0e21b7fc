package installer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/release"
)

// ErrNotOwned: a release or runtime directory entry is not owned by the
// user running hbx, or lets group or others write.
var ErrNotOwned = errors.New("not owned by hbx alone")

// ownDir makes the directory at path belong to the user running hbx and
// drops its group and other write bits; other bits are kept. It reports
// whether it changed anything.
func ownDir(path string) (bool, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	uid, gid := uint32(os.Geteuid()), uint32(os.Getegid())
	changed := false
	if st.Uid != uid || st.Gid != gid {
		if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
			return false, fmt.Errorf("chown %s: %w", path, err)
		}
		changed = true
	}
	if m := st.Mode & 0o7777; m&0o022 != 0 {
		if err := unix.Fchmod(fd, m&^0o022); err != nil {
			return false, fmt.Errorf("chmod %s: %w", path, err)
		}
		changed = true
	}
	return changed, nil
}

// ownDirs applies ownDir to each path, logging what it tightened.
func ownDirs(log *slog.Logger, paths ...string) error {
	for _, p := range paths {
		changed, err := ownDir(p)
		if err != nil {
			return err
		}
		if changed {
			log.Info("made the directory hbx's alone (owner, no group or other write)", "path", p)
		}
	}
	return nil
}

// ownRelease brings a release installed by an earlier hbx, which applied
// the image's numeric owners, to what a cold install makes now: every entry
// of the release directory owned by the user running hbx, directories and
// regular files with extract.RuntimeMode modes (symlinks only change
// owner), files.json's modes rewritten to match, then Meta.Ownership set
// in release.json. A release already marked is left alone without any
// system call, so the warm path stays a no-op. Nothing is re-downloaded or
// re-hashed.
//
// The walk uses *at calls on handles opened from the release directory
// with O_NOFOLLOW: no symlink is followed. Directories are fixed before
// their entries are listed, and all directories before any file, so a
// user who could write in the old tree can add, rename or remove nothing
// once the files are reached. A regular file whose link count exceeds the
// links found inside the release has a hard link outside it: it is refused
// (ErrNotOwned), not widened, so no file outside the release is ever made
// readable. Interrupted, it is redone by the next call (every step is
// idempotent; the mark is written last, after a syncfs). Not guaranteed:
// a writer that opened a file before the walk keeps its descriptor; only
// `hbx install --verify` finds what it wrote.
func ownRelease(inst *release.Installed, log *slog.Logger) error {
	if inst.Meta.Ownership >= release.OwnedByHbx {
		return nil
	}
	start := time.Now()
	w := &ownWalker{uid: os.Geteuid(), gid: os.Getegid(), links: map[uint64]uint32{}}
	if err := w.walk(inst.Dir, w.fixDir); err != nil {
		return fmt.Errorf("fix ownership of release %s: %w", filepath.Base(inst.Dir), err)
	}
	if err := w.walk(inst.Dir, w.fixEntry); err != nil {
		return fmt.Errorf("fix ownership of release %s: %w", filepath.Base(inst.Dir), err)
	}
	if err := rewriteFileModes(inst); err != nil {
		return fmt.Errorf("fix ownership of release %s: %w", filepath.Base(inst.Dir), err)
	}
	if err := atomicfile.SyncFS(inst.Dir); err != nil {
		return fmt.Errorf("fix ownership of release %s: %w", filepath.Base(inst.Dir), err)
	}
	meta := inst.Meta
	meta.Ownership = release.OwnedByHbx
	mb, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", release.MetaFile, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(inst.Dir, release.MetaFile), append(mb, '\n'), 0o644); err != nil {
		return fmt.Errorf("mark release %s: %w", filepath.Base(inst.Dir), err)
	}
	inst.Meta = meta
	log.Info("release made hbx's alone: image owners dropped, modes per the runtime rule",
		"release", filepath.Base(inst.Dir), "entries", w.entries, "changed", w.changed, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// rewriteFileModes applies extract.RuntimeMode to the modes files.json
// records for directories and regular files, so --verify agrees with the
// fixed tree. Releases without files.json are left so (--verify reports it).
func rewriteFileModes(inst *release.Installed) error {
	if _, err := os.Lstat(filepath.Join(inst.Dir, release.FilesFile)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	list, err := inst.OpenFiles()
	if err != nil {
		return err
	}
	defer list.Close()
	return atomicfile.Write(filepath.Join(inst.Dir, release.FilesFile), 0o644, func(out io.Writer) error {
		bw := bufio.NewWriterSize(out, 64<<10)
		bw.WriteString("[")
		for i := 0; ; i++ {
			f, ok, err := list.Next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if f.Type != "symlink" {
				f.Mode = extract.RuntimeMode(f.Mode)
			}
			b, err := json.Marshal(f)
			if err != nil {
				return err
			}
			if i > 0 {
				bw.WriteString(",")
			}
			bw.WriteString("\n")
			bw.Write(b)
		}
		bw.WriteString("\n]\n")
		return bw.Flush()
	})
}

// checkOwned walks the release directory (no symlink followed) and
// describes the first entry that is not owned by the user running hbx, or
// that lets group or others write, or has setuid or setgid; "" when none.
func checkOwned(dir string) (string, error) {
	uid := uint32(os.Geteuid())
	var why string
	errFound := errors.New("found")
	w := &ownWalker{}
	err := w.walk(dir, func(dfd int, name, rel string, st *unix.Stat_t) error {
		m := st.Mode & 0o7777
		switch {
		case st.Uid != uid:
			why = fmt.Sprintf("%s is owned by uid %d, want %d (the user running hbx)", rel, st.Uid, uid)
		case st.Mode&unix.S_IFMT != unix.S_IFLNK && m&0o022 != 0:
			why = fmt.Sprintf("%s has mode %04o: group or others may write", rel, m)
		case m&(unix.S_ISUID|unix.S_ISGID) != 0:
			why = fmt.Sprintf("%s has mode %04o: setuid or setgid", rel, m)
		default:
			return nil
		}
		return errFound
	})
	if errors.Is(err, errFound) {
		return fmt.Sprintf("%s: %s", ErrNotOwned, why), nil
	}
	return "", err
}

// ownWalker walks a tree with *at calls on O_NOFOLLOW directory handles.
type ownWalker struct {
	uid, gid int
	links    map[uint64]uint32 // inode -> links seen in the tree, for files with st_nlink > 1
	entries  int
	changed  int
}

// walk calls visit for the root directory (name "", rel ".") and every
// entry below it, a directory before its entries. visit may change the
// entry's owner and mode; the directory's listing is read after its visit.
func (w *ownWalker) walk(root string, visit func(dfd int, name, rel string, st *unix.Stat_t) error) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", root, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("stat %s: %w", root, err)
	}
	if err := visit(fd, "", ".", &st); err != nil {
		unix.Close(fd)
		return err
	}
	return w.dir(fd, "", visit)
}

// dir visits the entries of the directory open as dfd and closes it.
func (w *ownWalker) dir(dfd int, prefix string, visit func(int, string, string, *unix.Stat_t) error) error {
	d := os.NewFile(uintptr(dfd), prefix)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list %q: %w", prefix, err)
	}
	sort.Strings(names)
	for _, n := range names {
		rel := n
		if prefix != "" {
			rel = prefix + "/" + n
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("lstat %q: %w", rel, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := visit(dfd, n, rel, &st); err != nil {
				return err
			}
			continue
		}
		cfd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %q: %w", rel, err)
		}
		if err := unix.Fstat(cfd, &st); err != nil {
			unix.Close(cfd)
			return fmt.Errorf("stat %q: %w", rel, err)
		}
		if err := visit(cfd, "", rel, &st); err != nil {
			unix.Close(cfd)
			return err
		}
		if err := w.dir(cfd, rel, visit); err != nil {
			return err
		}
	}
	return nil
}

// fixDir is the first pass: directories get owner and RuntimeMode (on
// their own handle, name ""); regular files with several links are
// counted.
func (w *ownWalker) fixDir(fd int, name, rel string, st *unix.Stat_t) error {
	if name != "" {
		if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 {
			w.links[st.Ino]++
		}
		return nil
	}
	return w.fixFd(fd, rel, st)
}

// fixEntry is the second pass: regular files (on a descriptor of their
// own, checked to be the file stat saw) and symlinks (owner only).
func (w *ownWalker) fixEntry(dfd int, name, rel string, st *unix.Stat_t) error {
	w.entries++
	if name == "" { // a directory, done by fixDir
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		if int(st.Uid) == w.uid && int(st.Gid) == w.gid {
			return nil
		}
		w.changed++
		if err := unix.Fchownat(dfd, name, w.uid, w.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown %q: %w", rel, err)
		}
		return nil
	case unix.S_IFREG:
		fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %q: %w", rel, err)
		}
		defer unix.Close(fd)
		var fst unix.Stat_t
		if err := unix.Fstat(fd, &fst); err != nil {
			return fmt.Errorf("stat %q: %w", rel, err)
		}
		if fst.Mode&unix.S_IFMT != unix.S_IFREG || fst.Ino != st.Ino || fst.Dev != st.Dev {
			return fmt.Errorf("%q: %w: replaced while it was fixed", rel, ErrNotOwned)
		}
		if fst.Nlink > 1 && w.links[fst.Ino] != uint32(fst.Nlink) {
			return fmt.Errorf("%q: %w: %d hard links, %d of them in the release", rel, ErrNotOwned, fst.Nlink, w.links[fst.Ino])
		}
		return w.fixFd(fd, rel, &fst)
	default:
		return fmt.Errorf("%q: %w: unexpected file type %#o (no release holds one)", rel, ErrNotOwned, st.Mode&unix.S_IFMT)
	}
}

// fixFd gives the file or directory open as fd the user running hbx as
// owner, then RuntimeMode of its mode.
func (w *ownWalker) fixFd(fd int, rel string, st *unix.Stat_t) error {
	touched := false
	if int(st.Uid) != w.uid || int(st.Gid) != w.gid {
		if err := unix.Fchown(fd, w.uid, w.gid); err != nil {
			return fmt.Errorf("chown %q: %w", rel, err)
		}
		touched = true
	}
	// chown clears setuid and setgid; the mode is set from what stat saw.
	m := st.Mode & 0o7777
	if want := extract.RuntimeMode(m); want != m || touched {
		if err := unix.Fchmod(fd, want); err != nil {
			return fmt.Errorf("chmod %q: %w", rel, err)
		}
		touched = true
	}
	if touched {
		w.changed++
	}
	return nil
}

// FixOwnership makes the active and previous releases the user's running
// hbx alone when an earlier hbx installed them with the image's owners
// (see ownRelease): what Install does on its warm path, for callers about
// to run the payload without installing (hbx run, hbx supervise without
// install_on_start). A marked active release costs one read of its
// release.json and no lock; otherwise it takes the runtime directory's
// lock, waiting up to wait. An error means the active release could not
// be fixed: do not run it (hbx install replaces it).
func FixOwnership(ctx context.Context, runtimeDir string, wait time.Duration, log *slog.Logger) (err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cur, err := release.Current(runtimeDir)
	if err != nil || cur.Meta.Ownership >= release.OwnedByHbx {
		return nil // nothing to fix; the caller reports a missing release itself
	}
	lk, err := release.LockRuntime(ctx, runtimeDir, "hbx (fix release ownership)", wait, nil)
	if err != nil {
		return fmt.Errorf("fix release ownership: %w", err)
	}
	defer func() {
		if uerr := lk.Unlock(); uerr != nil && err == nil {
			err = fmt.Errorf("release lock: %w", uerr)
		}
	}()
	if err := ownDirs(log, runtimeDir); err != nil {
		return fmt.Errorf("runtime directory: %w", err)
	}
	if prev, err := release.Link(runtimeDir, release.PreviousLink); err == nil {
		if err := ownRelease(prev, log); err != nil {
			log.Warn("the previous release stays unusable for a rollback until fixed", "err", err)
		}
	}
	if cur, err = release.Current(runtimeDir); err != nil { // re-read under the lock
		return nil
	}
	if err := ownRelease(cur, log); err != nil {
		return fmt.Errorf("%w; run `hbx install` to install it again", err)
	}
	return nil
}
