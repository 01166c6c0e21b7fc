package extract

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/fsat"
)

// resolvedDir is a directory found by resolve: its handle (owned by cdirs)
// and its canonical name.
type resolvedDir struct {
	f     *os.File
	canon string
}

// maxSymlinks bounds the symlinks followed while resolving one name, in
// total, as the kernel's MAXSYMLINKS.
const maxSymlinks = 40

// maxCachedDirs bounds the open directory handles kept between entries.
const maxCachedDirs = 1024

// parent returns a handle on directory dir (root-relative), created with
// mode 0755 where missing, and its canonical name. See resolve.
func (a *Applier) parent(dir string) (*os.File, string, error) {
	f, canon, err := a.resolve(dir, true)
	if err != nil {
		return nil, "", fmt.Errorf("resolve parent %q: %w", truncate(dir), err)
	}
	return f, canon, nil
}

// lookupDir resolves an existing directory without creating anything. It
// returns a nil handle when dir does not exist or is not a directory.
func (a *Applier) lookupDir(dir string) (*os.File, string, error) {
	return a.resolve(dir, false)
}

// resolve walks name (root-relative) one component at a time with *at calls
// on directory handles, the way the kernel resolves a path under chroot (or
// openat2 RESOLVE_IN_ROOT): a symlink's target continues from the directory
// holding the symlink, or from the root when absolute; ".." goes to the
// parent of the directory actually reached and stops at the root. At most
// maxSymlinks symlinks are followed for the whole name (ELOOP beyond).
// With create, missing components are made (0755), also behind dangling
// symlinks (var/run -> /run makes <root>/run, as tar does under chroot;
// pathrs-lite's MkdirAllHandle refuses that case); without it, a missing or
// non-directory component yields a nil handle and no error.
//
// It returns the handle and the canonical (symlink-free) root-relative name.
// Handles belong to the cache and stay open at least until the current
// entry is done.
func (a *Applier) resolve(name string, create bool) (*os.File, string, error) {
	if name == "" {
		return a.root, "", nil
	}
	if r, ok := a.dirs[name]; ok {
		return r.f, r.canon, nil
	}
	w := &walk{name: name, cur: a.root, queue: strings.Split(name, "/")}
	for len(w.queue) > 0 {
		c := w.queue[0]
		w.queue = w.queue[1:]
		missing, err := false, error(nil)
		switch c {
		case "", ".":
		case "..":
			err = a.up(w)
		default:
			missing, err = a.step(w, c, create)
		}
		if err != nil {
			return nil, "", err
		}
		if missing {
			return nil, "", nil
		}
	}
	cn := strings.Join(w.canon, "/")
	a.dirs[name] = resolvedDir{f: w.cur, canon: cn}
	return w.cur, cn, nil
}

// walk is one resolve under way: the directory reached, its canonical
// components, the components left to walk and the symlinks followed.
type walk struct {
	name  string // the name being resolved, for errors
	cur   *os.File
	canon []string
	queue []string
	links int
}

// up walks "..": to the parent of the directory actually reached, never
// above the root.
func (a *Applier) up(w *walk) error {
	if len(w.canon) > 0 {
		w.canon = w.canon[:len(w.canon)-1]
	}
	f, err := a.canonDir(w.canon)
	if err != nil {
		return err
	}
	w.cur = f
	return nil
}

// step walks component c from the directory reached: into a directory,
// through a symlink, or (with create) making a missing directory and
// looking again. missing reports a component that is absent or not a
// directory when create is false.
func (a *Applier) step(w *walk, c string, create bool) (missing bool, err error) {
	next := append(w.canon[:len(w.canon):len(w.canon)], c)
	key := strings.Join(next, "/")
	if f, ok := a.cdirs[key]; ok {
		w.cur, w.canon = f, next
		return false, nil
	}
	var st unix.Stat_t
	err = unix.Fstatat(fd(w.cur), c, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		if !create {
			return true, nil
		}
		a.touch(key)
		if err := mkdirStep(w.cur, c, key); err != nil {
			return false, err
		}
		w.queue = append([]string{c}, w.queue...) // look again at what is there now
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lstat %q: %w", truncate(key), err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return false, a.enter(w, c, key, next)
	case unix.S_IFLNK:
		return false, a.follow(w, c, key)
	default:
		if !create {
			return true, nil
		}
		return false, fmt.Errorf("%q: %w", truncate(key), unix.ENOTDIR)
	}
}

// mkdirStep makes the missing directory c in cur, 0755 whatever the umask
// (a umask of 002 would make it group-writable); one made meanwhile is
// fine.
func mkdirStep(cur *os.File, c, key string) error {
	if err := unix.Mkdirat(fd(cur), c, 0o755); err == nil {
		if err := unix.Fchmodat(fd(cur), c, 0o755, 0); err != nil {
			return fmt.Errorf("chmod %q: %w", truncate(key), err)
		}
	} else if !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("mkdir %q: %w", truncate(key), err)
	}
	return nil
}

// enter opens the directory c of the directory reached, caches its handle
// under its canonical name key and walks into it.
func (a *Applier) enter(w *walk, c, key string, next []string) error {
	cfd, err := unix.Openat(fd(w.cur), c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %q: %w", truncate(key), err)
	}
	f := os.NewFile(uintptr(cfd), key)
	if len(a.cdirs) >= maxCachedDirs {
		a.invalidate() // retired handles stay open until the entry is done
	}
	a.cdirs[key] = f
	w.cur, w.canon = f, next
	return nil
}

// follow puts the target of symlink c in front of what is left to walk,
// from the root when it is absolute; ELOOP past maxSymlinks.
func (a *Applier) follow(w *walk, c, key string) error {
	w.links++
	if w.links > maxSymlinks {
		return fmt.Errorf("resolve %q: %w", truncate(w.name), unix.ELOOP)
	}
	target, err := fsat.Readlink(fd(w.cur), c)
	if err != nil {
		return fmt.Errorf("readlink %q: %w", truncate(key), err)
	}
	if strings.HasPrefix(target, "/") {
		w.cur, w.canon = a.root, nil
	}
	w.queue = append(strings.Split(target, "/"), w.queue...)
	return nil
}

// canonDir returns the handle of a canonical (symlink-free) name.
func (a *Applier) canonDir(canon []string) (*os.File, error) {
	if len(canon) == 0 {
		return a.root, nil
	}
	key := strings.Join(canon, "/")
	if f, ok := a.cdirs[key]; ok {
		return f, nil
	}
	f, _, err := a.resolve(key, false)
	if err != nil {
		return nil, err
	}
	if f == nil {
		return nil, fmt.Errorf("resolve %q: %w", truncate(key), unix.ENOENT)
	}
	return f, nil
}

// truncate shortens a name for error messages.
func truncate(s string) string {
	if len(s) > 256 {
		return s[:256] + "..."
	}
	return s
}

// invalidate forgets every cached handle: a removal may have taken away
// what they name. Handles stay open until the current entry is done, since
// the caller may still be using one.
func (a *Applier) invalidate() {
	for k, f := range a.cdirs {
		a.retired = append(a.retired, f)
		delete(a.cdirs, k)
	}
	clear(a.dirs)
}

func (a *Applier) closeRetired() {
	for _, f := range a.retired {
		f.Close()
	}
	a.retired = a.retired[:0]
}

func (a *Applier) dropDirs() {
	a.invalidate()
	a.closeRetired()
}

func fd(f *os.File) int { return int(f.Fd()) }
