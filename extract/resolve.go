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
	cur, canon := a.root, []string(nil)
	queue := strings.Split(name, "/")
	links := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(canon) > 0 {
				canon = canon[:len(canon)-1]
			}
			f, err := a.canonDir(canon)
			if err != nil {
				return nil, "", err
			}
			cur = f
			continue
		}
		next := append(canon[:len(canon):len(canon)], c)
		key := strings.Join(next, "/")
		if f, ok := a.cdirs[key]; ok {
			cur, canon = f, next
			continue
		}
		var st unix.Stat_t
		err := unix.Fstatat(fd(cur), c, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			if !create {
				return nil, "", nil
			}
			if err := unix.Mkdirat(fd(cur), c, 0o755); err == nil {
				// 0755 whatever the umask (a umask of 002 would make it
				// group-writable).
				if err := unix.Fchmodat(fd(cur), c, 0o755, 0); err != nil {
					return nil, "", fmt.Errorf("chmod %q: %w", truncate(key), err)
				}
			} else if !errors.Is(err, unix.EEXIST) {
				return nil, "", fmt.Errorf("mkdir %q: %w", truncate(key), err)
			}
			queue = append([]string{c}, queue...) // look again at what is there now
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("lstat %q: %w", truncate(key), err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			cfd, err := unix.Openat(fd(cur), c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, "", fmt.Errorf("open %q: %w", truncate(key), err)
			}
			f := os.NewFile(uintptr(cfd), key)
			if len(a.cdirs) >= maxCachedDirs {
				a.invalidate() // retired handles stay open until the entry is done
			}
			a.cdirs[key] = f
			cur, canon = f, next
		case unix.S_IFLNK:
			links++
			if links > maxSymlinks {
				return nil, "", fmt.Errorf("resolve %q: %w", truncate(name), unix.ELOOP)
			}
			target, err := fsat.Readlink(fd(cur), c)
			if err != nil {
				return nil, "", fmt.Errorf("readlink %q: %w", truncate(key), err)
			}
			if strings.HasPrefix(target, "/") {
				cur, canon = a.root, nil
			}
			queue = append(strings.Split(target, "/"), queue...)
		default:
			if !create {
				return nil, "", nil
			}
			return nil, "", fmt.Errorf("%q: %w", truncate(key), unix.ENOTDIR)
		}
	}
	cn := strings.Join(canon, "/")
	a.dirs[name] = resolvedDir{f: cur, canon: cn}
	return cur, cn, nil
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
