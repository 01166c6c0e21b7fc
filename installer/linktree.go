package installer

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/fsat"
)

// linkTree makes the empty directory dst a copy of the tree src that
// shares its files: regular files and symlinks are hard-linked (the same
// inodes, never opened), directories are made anew with src's modes and
// times (set after their children). It walks with *at calls on handles
// opened with O_NOFOLLOW. With each not nil it walks in Walk order (sorted
// names, depth first) on the calling goroutine, calling each with every
// entry's root-relative name and what is known of it before linking it:
// type and inode number, and for a directory the whole lstat (files and
// symlinks are not stat'ed); an error from each stops the walk. With each
// nil, subdirectories are linked by up to GOMAXPROCS goroutines at once,
// at most maxLinkWalkers (linkat is a syscall per file, so the walk is the
// kernel's work and spreads over the CPUs); the resulting tree is the same. Errors from
// linkat (EXDEV, EMLINK, EPERM: no hard links here) are returned as they
// are, wrapped; after one error no further subdirectory is started.
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
	l := newLinker(each)
	if err := l.dir(sfd, dfd, ""); err != nil {
		return fmt.Errorf("link tree: %w", err)
	}
	if err := copyDirMeta(dfd, &st); err != nil {
		return fmt.Errorf("link tree: %w", err)
	}
	return nil
}

// maxLinkWalkers caps linkTree's goroutines: each holds about two
// descriptors per directory level it is in, and the install's fetcher
// and applier need theirs meanwhile, so a host with many CPUs and a low
// RLIMIT_NOFILE does not lend them all to the walk. Past a few CPUs the
// walk is bound by the file system's locks, not by CPUs.
const maxLinkWalkers = 8

// linker is one linkTree walk. With slots (parallel mode), a goroutine
// holds a slot while it works and gives it back while it waits for the
// subdirectories it handed to others, so at most cap(slots) goroutines
// make syscalls at once and a finished one's slot goes to the next
// subdirectory any walker meets: the work spreads however the tree is
// shaped. Waiting walkers hold their directories' two handles, so open
// handles stay within about twice the tree's depth per slot.
type linker struct {
	each   func(string, *unix.Stat_t) error
	slots  chan struct{} // nil: one goroutine, Walk order
	mu     sync.Mutex
	err    error       // the walk's first error, on whichever goroutine
	failed atomic.Bool // err is set: start nothing more
}

// newLinker returns a walk calling each; with each nil and more than one
// CPU, a parallel one of min(GOMAXPROCS, maxLinkWalkers) slots, the
// calling goroutine holding the first.
func newLinker(each func(string, *unix.Stat_t) error) *linker {
	l := &linker{each: each}
	if n := min(runtime.GOMAXPROCS(0), maxLinkWalkers); each == nil && n > 1 {
		l.slots = make(chan struct{}, n)
		l.slots <- struct{}{} // the calling goroutine's
	}
	return l
}

// fail records err when it is the walk's first.
func (l *linker) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
		l.failed.Store(true)
	}
}

// handedOff counts the subdirectories of one directory linked on other
// goroutines.
type handedOff struct {
	wg sync.WaitGroup
	n  int
}

// handOff links subdirectory n (root-relative p) of sfd into dfd on a
// goroutine of its own when a slot is free, and reports whether it did.
func (l *linker) handOff(h *handedOff, sfd, dfd int, n, p string, st *unix.Stat_t) bool {
	if l.slots == nil {
		return false
	}
	select {
	case l.slots <- struct{}{}:
	default:
		return false
	}
	h.n++
	h.wg.Add(1)
	st2 := *st
	go func() {
		defer h.wg.Done()
		defer func() { <-l.slots }()
		if err := l.subdir(sfd, dfd, n, p, &st2); err != nil {
			l.fail(err)
		}
	}()
	return true
}

// wait waits for the subdirectories handed off from one directory,
// giving the caller's slot to others meanwhile, and returns the walk's
// first error.
func (l *linker) wait(h *handedOff) error {
	if h.n > 0 {
		<-l.slots
		h.wg.Wait()
		l.slots <- struct{}{}
		h.n = 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// dir links the children of the directory open as sfd (root-relative
// name prefix) into the directory open as dfd. Names, types and inode
// numbers come from getdents (fsat.ReadDirents), so a file costs one
// linkat: only directories (and entries of unknown type) are stat'ed.
// It returns only once every subdirectory it handed to another goroutine
// is done: they use sfd and dfd.
func (l *linker) dir(sfd, dfd int, prefix string) error {
	ents, err := fsat.ReadDirents(sfd)
	if err != nil {
		return fmt.Errorf("list %q: %w", prefix, err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name < ents[j].Name })
	var h handedOff
	for _, e := range ents {
		if l.failed.Load() {
			break
		}
		if err := l.entry(&h, sfd, dfd, prefix, e); err != nil {
			l.fail(err) // stop every walker, not only this one
			l.wait(&h)
			return err
		}
	}
	return l.wait(&h)
}

// entry links the directory entry e of sfd into dfd: a subdirectory
// made and linked (on another goroutine when a slot is free), a file or
// symlink hard-linked.
func (l *linker) entry(h *handedOff, sfd, dfd int, prefix string, e fsat.Dirent) error {
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
		if l.handOff(h, sfd, dfd, e.Name, p, &st) {
			return nil
		}
		return l.subdir(sfd, dfd, e.Name, p, &st)
	case unix.S_IFREG, unix.S_IFLNK:
		if err := unix.Linkat(sfd, e.Name, dfd, e.Name, 0); err != nil {
			return fmt.Errorf("link %q: %w", p, err)
		}
		return nil
	default:
		return fmt.Errorf("%q: unexpected file type %#o", p, st.Mode&unix.S_IFMT)
	}
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
