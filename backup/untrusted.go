package backup

// What a restore takes from an archive beside file contents: which
// extended attributes it applies (keepXattr) and, for an archive that is
// not authenticated, that every symlink it planted resolves beneath the
// restored directory (checkSymlinksBeneath). See the package doc,
// "What an archive may plant".

import (
	"archive/tar"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// keepXattr reports whether the restore applies the extended attribute
// name, authenticated telling whether the archive was decrypted with the
// box's passphrase. The rule (the kernel's namespaces, xattr(7)):
//
//   - user.*: kept. Unprivileged data any program of the Executor user
//     could have set itself.
//   - system.posix_acl_access, system.posix_acl_default: kept from an
//     authenticated archive only (the box's own ACLs); an unauthenticated
//     one could open the Executor's files to other users.
//   - security.* (capability: file capabilities, which make a program the
//     Executor user runs privileged; selinux, smack, ima, evm: the host's
//     policy labels its files itself) and trusted.* (root-only; overlayfs
//     and others read them as instructions): never, like setuid bits.
//   - anything else: never.
func keepXattr(name string, authenticated bool) bool {
	switch {
	case strings.HasPrefix(name, "user."):
		return true
	case name == "system.posix_acl_access", name == "system.posix_acl_default":
		return authenticated
	}
	return false
}

// maxDroppedNames bounds the distinct attribute names droppedXattrs
// remembers (the names are the archive's word); the rest are counted.
const maxDroppedNames = 16

// droppedXattrs counts the extended attributes a restore did not apply,
// by name.
type droppedXattrs struct {
	byName map[string]int
	other  int
}

// add counts one dropped attribute name.
func (d *droppedXattrs) add(name string) {
	if _, ok := d.byName[name]; !ok && len(d.byName) >= maxDroppedNames {
		d.other++
		return
	}
	if d.byName == nil {
		d.byName = map[string]int{}
	}
	d.byName[name]++
}

// note is one line saying what was dropped, "" when nothing was.
func (d *droppedXattrs) note() string {
	if len(d.byName) == 0 && d.other == 0 {
		return ""
	}
	names := make([]string, 0, len(d.byName))
	for n, c := range d.byName {
		names = append(names, fmt.Sprintf("%q (%d)", n, c))
	}
	sort.Strings(names)
	if d.other > 0 {
		names = append(names, fmt.Sprintf("%d of other names", d.other))
	}
	return "extended attributes not restored (only user.* is kept, and ACLs from an authenticated archive; file capabilities, security.* and trusted.* never): " + strings.Join(names, ", ")
}

// checkSymlinksBeneath refuses (ErrImageRefused) a symlink of the staged
// tree dir that resolves out of it, through however many other symlinks
// and ".." components, or does not resolve (a loop): the kernel resolves
// each one with openat2 RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS from dir.
// A symlink to nothing (ENOENT, ENOTDIR) is fine. Without openat2 (Linux
// before 5.6) it refuses any ".." component in a symlink's target
// instead. archRoot is dir's archive path, for the error.
func checkSymlinksBeneath(dir, archRoot string) error {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(root)
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if err := resolvesBeneath(root, rel); err != nil {
			return &entryError{path: path2arch(archRoot, rel), err: err}
		}
		return nil
	})
}

// resolvesBeneath returns nil when rel, a symlink beneath the directory
// root, resolves beneath it or to nothing.
func resolvesBeneath(root int, rel string) error {
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case err == nil:
		unix.Close(fd)
		return nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return nil
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: symlink resolves out of the restored directory or in a loop, which an archive that is not authenticated may not plant", ErrImageRefused)
	case errors.Is(err, unix.ENOSYS):
		return climbsAnywhere(root, rel)
	}
	return fmt.Errorf("resolve symlink %s: %w", rel, err)
}

// climbsAnywhere is resolvesBeneath without openat2: it refuses a target
// with any ".." component (or an absolute one).
func climbsAnywhere(root int, rel string) error {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(root, rel, buf)
	if err != nil {
		return fmt.Errorf("read symlink %s: %w", rel, err)
	}
	target := string(buf[:n])
	if strings.HasPrefix(target, "/") || target == ".." || strings.HasPrefix(target, "../") || strings.HasSuffix(target, "/..") || strings.Contains(target, "/../") {
		return fmt.Errorf("%w: symlink to %q has a \"..\" component, which an archive that is not authenticated may not plant on a kernel without openat2", ErrImageRefused, target)
	}
	return nil
}

// path2arch is the archive path of rel beneath the root archived as
// archRoot.
func path2arch(archRoot, rel string) string {
	if archRoot == "." || archRoot == "" {
		return rel
	}
	return archRoot + "/" + rel
}

// linkTree is what Verify knows of an archive's data directory to say
// which symlinks would resolve out of it: its directories and symlinks
// by archive path (extra paths left out: an unauthenticated archive does
// not restore them).
type linkTree struct {
	dirs  map[string]bool
	links map[string]string
	order []string
}

// add records hdr (its name the clean archive path).
func (t *linkTree) add(hdr *tar.Header) {
	p := hdr.Name
	if p == PathsPrefix || strings.HasPrefix(p, PathsPrefix+"/") {
		return
	}
	if t.dirs == nil {
		t.dirs, t.links = map[string]bool{}, map[string]string{}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		t.dirs[p] = true
	case tar.TypeSymlink:
		t.links[p] = hdr.Linkname
		t.order = append(t.order, p)
	}
}

// outside returns the symlinks that would resolve out of the directory or
// in a loop, as the restore would refuse them (leavesRoot while reading,
// checkSymlinksBeneath once staged), in archive order.
func (t *linkTree) outside() []string {
	var out []string
	for _, p := range t.order {
		if leavesRoot(p, t.links[p]) || t.escapes(p) {
			out = append(out, p)
		}
	}
	return out
}

// maxLinkFollows is the kernel's limit on symlinks followed in one
// resolution (MAXSYMLINKS); more is ELOOP.
const maxLinkFollows = 40

// escapes resolves p component by component, following the tree's
// symlinks: true when a ".." climbs above the root, a target is
// absolute, or more than maxLinkFollows symlinks are followed; false when
// it ends inside or at a name that does not exist.
func (t *linkTree) escapes(p string) bool {
	var at []string // the resolved components so far
	rest := strings.Split(p, "/")
	for follows := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(at) == 0 {
				return true
			}
			at = at[:len(at)-1]
			continue
		}
		at = append(at, c)
		cur := strings.Join(at, "/")
		if target, ok := t.links[cur]; ok {
			if follows++; follows > maxLinkFollows || strings.HasPrefix(target, "/") {
				return true
			}
			at = at[:len(at)-1]
			rest = append(strings.Split(target, "/"), rest...)
			continue
		}
		if len(rest) > 0 && !t.dirs[cur] {
			return false // ENOENT or ENOTDIR: resolves to nothing
		}
	}
	return false
}
