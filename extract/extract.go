package extract

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/hermesbox/hbx/internal/fsat"
	"hash"
	"hash/maphash"
	"io"
	"log/slog"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Errors returned (wrapped) by Apply. Use errors.Is.
var (
	// ErrUnsafePath: an entry or hardlink name climbs above the root, or the
	// root itself is named by something that is not a directory.
	ErrUnsafePath = errors.New("path escapes root")
	// ErrUnsupportedType: devices, fifos and unknown tar entry types.
	ErrUnsupportedType = errors.New("unsupported entry type")
	// ErrBadWhiteout: a whiteout that names nothing or a reserved name.
	ErrBadWhiteout = errors.New("malformed whiteout")
	// ErrBadLink: a hardlink whose target is missing or a directory.
	ErrBadLink = errors.New("bad hardlink")
	// ErrTooLarge: the uncompressed stream exceeds Options.MaxBytes.
	ErrTooLarge = errors.New("uncompressed size limit exceeded")
	// ErrLimit: entry count or name length exceeds its cap.
	ErrLimit = errors.New("archive limit exceeded")
)

// Whiteout names, image-spec layer.md "Whiteouts".
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// Defaults for the zero values of Options.
const (
	DefaultMaxEntries = 4 << 20 // entries per Applier
	DefaultMaxPathLen = 4096    // bytes, as PATH_MAX
)

// Options tune an Applier. The zero value applies no byte cap; callers that
// read untrusted streams set MaxBytes.
type Options struct {
	// MaxBytes caps the uncompressed bytes read across every Apply of this
	// Applier, tar headers and padding included. 0 means no cap.
	MaxBytes int64
	// MaxEntries caps the entries across every Apply (default DefaultMaxEntries).
	MaxEntries int
	// MaxPathLen caps the length in bytes of entry and link names
	// (default DefaultMaxPathLen).
	MaxPathLen int
	// PreserveOwners applies each entry's numeric uid and gid (needs root).
	PreserveOwners bool
	// RuntimeModes gives every entry the mode RuntimeMode derives from its
	// header's, and never its header's owner: entries belong to the user
	// running Apply (root, for hbx install). The installer uses it for
	// releases; it cannot be combined with PreserveOwners.
	RuntimeModes bool
	// HashFiles records a sha256 of every regular file written, for Files.
	HashFiles bool
	// Xattrs applies each file's and directory's extended attributes, the
	// PAX records "SCHILY.xattr.NAME" (as GNU tar --xattrs and archive/tar
	// write them), with fsetxattr on the entry's own open descriptor, after
	// its owner is set (a chown clears security.capability). Symlinks get
	// none (the kernel allows few on them, and the path would be followed);
	// hardlinks share their target's. Without it, xattr records are ignored.
	Xattrs bool
	// Literal treats every entry name as an ordinary path: no whiteouts and
	// no skipped aufs metadata. Backup archives are trees, not layers, and a
	// file named ".wh.x" in one is data.
	Literal bool
	// Logger receives one line per dropped setuid/setgid bit and skipped
	// aufs entry. nil discards.
	Logger *slog.Logger
}

// Stats counts what one Applier did, across all its Apply calls.
type Stats struct {
	Entries      int      // tar entries read
	Bytes        int64    // uncompressed bytes read
	Whiteouts    int      // whiteouts applied (opaque ones included)
	DroppedSetid []string // entry names whose setuid/setgid bits were dropped
}

// Applier applies layers, in order, to one root directory.
// It is not safe for concurrent use.
type Applier struct {
	root  *os.File
	opts  Options
	log   *slog.Logger
	stats Stats
	buf   []byte

	dirs    map[string]resolvedDir // resolved directories by entry (lexical) name, invalidated on any removal
	cdirs   map[string]*os.File    // open directory handles by canonical (symlink-free) name, likewise
	retired []*os.File             // invalidated handles, closed once the current entry is done
	logical int64                  // sum of regular files' claimed sizes (holes of sparse files included)
	hasher  *hasher                // sha256 of regular files written, by inode

	// per layer, keyed by canonical names so an alias through a symlink is
	// the same path
	layerPaths map[pathKey]bool // names this layer created (true) or passed through (false)
	pathSeeds  [2]maphash.Seed
	dirMeta    []dirMeta
	dirMetaAt  map[string]int // canonical name -> index in dirMeta of its latest entry
}

// resolvedDir is a directory found by resolve: its handle (owned by cdirs)
// and its canonical name.
type resolvedDir struct {
	f     *os.File
	canon string
}

type dirMeta struct {
	skip  bool   // superseded by a later entry for the same directory
	name  string // canonical
	mode  uint32
	atime time.Time
	mtime time.Time
}

// New opens rootDir, which must be an existing directory, for applying layers.
// Close releases it.
func New(rootDir string, opts Options) (*Applier, error) {
	root, err := os.OpenFile(rootDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root: %w", err)
	}
	if opts.RuntimeModes && opts.PreserveOwners {
		root.Close()
		return nil, errors.New("apply layers: RuntimeModes and PreserveOwners exclude each other")
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.MaxPathLen <= 0 {
		opts.MaxPathLen = DefaultMaxPathLen
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Applier{
		root:      root,
		opts:      opts,
		log:       log,
		buf:       make([]byte, 1<<20),
		dirs:      map[string]resolvedDir{},
		cdirs:     map[string]*os.File{},
		hasher:    newHasher(),
		pathSeeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
	}, nil
}

// Close releases the root and cached directory handles.
func (a *Applier) Close() error {
	a.hasher.close()
	a.dropDirs()
	return a.root.Close()
}

// Stats returns the counters so far.
func (a *Applier) Stats() Stats { return a.stats }

// Apply reads one uncompressed tar stream to its end (trailing padding
// included, so a caller hashing the stream sees every byte) and applies it
// as the next layer. Errors name the entry and wrap one of the package's
// sentinels or the underlying syscall error.
func (a *Applier) Apply(r io.Reader) error {
	lr := &limitReader{r: r, a: a}
	a.layerPaths = map[pathKey]bool{}
	a.dirMeta = a.dirMeta[:0]
	a.dirMetaAt = map[string]int{}
	tr := tar.NewReader(lr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", err)
		}
		err = a.entry(tr, hdr)
		a.closeRetired()
		if err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
	if _, err := io.CopyBuffer(io.Discard, lr, a.buf); err != nil {
		return fmt.Errorf("read tar trailer: %w", err)
	}
	return a.finishLayer()
}

// limitReader counts bytes into the Applier's stats and stops at MaxBytes.
type limitReader struct {
	r io.Reader
	a *Applier
}

func (l *limitReader) Read(p []byte) (int, error) {
	max := l.a.opts.MaxBytes
	if max > 0 {
		left := max - l.a.stats.Bytes
		if left <= 0 {
			// Allow reading EOF exactly at the cap.
			var one [1]byte
			n, err := l.r.Read(one[:])
			if n > 0 {
				return 0, fmt.Errorf("%w (%d bytes)", ErrTooLarge, max)
			}
			return 0, err
		}
		if int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := l.r.Read(p)
	l.a.stats.Bytes += int64(n)
	return n, err
}

// cleanName turns a tar name into a root-relative clean path ("" is the
// root). It refuses names that climb above the root.
func cleanName(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("%w: NUL byte in name", ErrUnsafePath)
	}
	var parts []string
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(parts) == 0 {
				return "", ErrUnsafePath
			}
			parts = parts[:len(parts)-1]
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/"), nil
}

func splitName(p string) (dir, leaf string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

func (a *Applier) entry(tr *tar.Reader, hdr *tar.Header) error {
	a.stats.Entries++
	if a.stats.Entries > a.opts.MaxEntries {
		return fmt.Errorf("%w: more than %d entries", ErrLimit, a.opts.MaxEntries)
	}
	if len(hdr.Name) > a.opts.MaxPathLen || len(hdr.Linkname) > a.opts.MaxPathLen {
		return fmt.Errorf("%w: name longer than %d bytes", ErrLimit, a.opts.MaxPathLen)
	}
	if max := a.opts.MaxBytes; max > 0 && hdr.Size > max-a.stats.Bytes {
		return fmt.Errorf("%w: entry claims %d bytes, %d left of %d", ErrTooLarge, hdr.Size, max-a.stats.Bytes, max)
	}
	// A sparse file's holes cost no input but fill the disk: the claimed
	// sizes of all files count against the cap too.
	if max := a.opts.MaxBytes; max > 0 && hdr.Size > max-a.logical {
		return fmt.Errorf("%w: files claim more than %d bytes in all", ErrTooLarge, max)
	}
	if hdr.Size > 0 {
		a.logical += hdr.Size
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	p, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	dir, leaf := splitName(p)

	// Whiteouts and aufs metadata.
	for _, c := range strings.Split(p, "/") {
		if a.opts.Literal {
			break
		}
		if strings.HasPrefix(c, whiteoutMeta) && !(c == whiteoutOpaque && c == leaf) {
			a.log.Debug("skip aufs metadata", "entry", hdr.Name)
			return nil
		}
	}
	if leaf == whiteoutOpaque && !a.opts.Literal {
		a.stats.Whiteouts++
		return a.opaque(dir)
	}
	if strings.HasPrefix(leaf, whiteoutPrefix) && !a.opts.Literal {
		name := strings.TrimPrefix(leaf, whiteoutPrefix)
		if name == "" || name == "." || name == ".." {
			return ErrBadWhiteout
		}
		a.stats.Whiteouts++
		return a.whiteout(dir, name)
	}

	// Layer bookkeeping uses canonical names: an alias through a symlink
	// is the same path.
	canon := ""
	if p != "" {
		_, cdir, err := a.parent(dir)
		if err != nil {
			return err
		}
		canon = path.Join(cdir, leaf)
	}
	a.markLayerPath(canon)
	if p == "" {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("%w: the root may only be a directory", ErrUnsafePath)
		}
		return a.rootDir(hdr)
	}

	mode := uint32(hdr.Mode) & 0o7777
	if mode&(unix.S_ISUID|unix.S_ISGID) != 0 && hdr.Typeflag != tar.TypeSymlink && hdr.Typeflag != tar.TypeLink {
		mode &^= unix.S_ISUID | unix.S_ISGID
		a.stats.DroppedSetid = append(a.stats.DroppedSetid, p)
		a.log.Warn("dropped setuid/setgid bits", "entry", p)
	}
	if a.opts.RuntimeModes {
		mode = RuntimeMode(mode)
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		return a.mkdir(canon, dir, leaf, mode, hdr)
	case tar.TypeReg, tar.TypeRegA, tar.TypeCont: //nolint:staticcheck // old archives still use '\x00'
		return a.file(tr, dir, leaf, mode, hdr)
	case tar.TypeSymlink:
		return a.symlink(dir, leaf, hdr)
	case tar.TypeLink:
		return a.hardlink(dir, leaf, hdr)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("%w: device or fifo (type %q)", ErrUnsupportedType, hdr.Typeflag)
	default:
		return fmt.Errorf("%w: type %q", ErrUnsupportedType, hdr.Typeflag)
	}
}

// markLayerPath records p as created by this layer and its parents as
// passed through (unless created themselves).
func (a *Applier) markLayerPath(p string) {
	a.layerPaths[a.key(p)] = true
	for d, _ := splitName(p); d != ""; d, _ = splitName(d) {
		k := a.key(d)
		if _, ok := a.layerPaths[k]; ok {
			break
		}
		a.layerPaths[k] = false
	}
}

// pathKey stands for a canonical name in layerPaths: two independently
// seeded 64-bit hashes, 16 bytes whatever the name's length, so the map
// costs the same per entry for deep trees. The seeds are random per
// Applier, so a layer cannot be built to make two names collide; by
// chance, two of n names collide with probability about n²/2¹²⁹.
type pathKey [2]uint64

func (a *Applier) key(name string) pathKey {
	return pathKey{maphash.String(a.pathSeeds[0], name), maphash.String(a.pathSeeds[1], name)}
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

// whiteout removes dir/leaf as left by lower layers.
func (a *Applier) whiteout(dir, leaf string) error {
	d, cdir, err := a.lookupDir(dir)
	if err != nil || d == nil {
		return err
	}
	p := path.Join(cdir, leaf)
	if a.layerPaths[a.key(p)] {
		return nil // created by this layer: whiteouts only hide lower layers
	}
	if _, ok := a.layerPaths[a.key(p)]; ok {
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
	a.layerPaths[a.key(cdir)] = true
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
		if _, inLayer := a.layerPaths[a.key(child)]; !inLayer {
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

func (a *Applier) rootDir(hdr *tar.Header) error {
	mode := uint32(hdr.Mode) & 0o7777 &^ (unix.S_ISUID | unix.S_ISGID)
	if a.opts.RuntimeModes {
		mode = RuntimeMode(mode)
	}
	if err := a.chown(a.root, "", hdr); err != nil {
		return err
	}
	if err := a.setXattrs(fd(a.root), hdr); err != nil {
		return err
	}
	a.addDirMeta(dirMeta{name: "", mode: mode, atime: hdr.AccessTime, mtime: hdr.ModTime})
	return nil
}

func (a *Applier) mkdir(p, dir, leaf string, mode uint32, hdr *tar.Header) error {
	d, _, err := a.parent(dir)
	if err != nil {
		return err
	}
	st, ok, err := lstatAt(d, leaf)
	if err != nil {
		return err
	}
	if ok && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := a.remove(d, leaf); err != nil {
			return err
		}
		ok = false
	}
	if !ok {
		// Owner rwx until the layer ends, so children can be created.
		if err := unix.Mkdirat(fd(d), leaf, 0o700); err != nil {
			return fmt.Errorf("mkdir: %w", err)
		}
	}
	if err := a.chown(d, leaf, hdr); err != nil {
		return err
	}
	if a.opts.Xattrs && hasXattrs(hdr) {
		cfd, err := unix.Openat(fd(d), leaf, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open for xattrs: %w", err)
		}
		err = a.setXattrs(cfd, hdr)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	a.addDirMeta(dirMeta{name: p, mode: mode, atime: hdr.AccessTime, mtime: hdr.ModTime})
	return nil
}

func (a *Applier) file(tr io.Reader, dir, leaf string, mode uint32, hdr *tar.Header) error {
	d, _, err := a.parent(dir)
	if err != nil {
		return err
	}
	// Create first; only when something is in the way, remove it and retry
	// (one syscall less per file on the common path: a fresh name).
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	ffd, err := unix.Openat(fd(d), leaf, flags, 0o600)
	if errors.Is(err, unix.EEXIST) {
		if err := a.remove(d, leaf); err != nil {
			return err
		}
		ffd, err = unix.Openat(fd(d), leaf, flags, 0o600)
	}
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	f := os.NewFile(uintptr(ffd), leaf)
	var small []byte // whole content of a small file, hashed off this goroutine
	var h hash.Hash
	var n int64
	if a.opts.HashFiles && hdr.Size <= hashInBackground {
		small = a.hasher.buffer(int(hdr.Size))
		defer func() {
			if small != nil { // not submitted: this entry failed
				a.hasher.release(small)
			}
		}()
		var rn int
		rn, err = io.ReadFull(tr, small)
		n = int64(rn)
		if err == nil {
			_, err = f.Write(small)
		}
	} else {
		var w io.Writer = f
		if a.opts.HashFiles {
			h = sha256.New()
			w = io.MultiWriter(f, h)
		}
		n, err = io.CopyBuffer(w, tr, a.buf)
	}
	if err == nil && n != hdr.Size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("write: %w", err)
	}
	if a.opts.PreserveOwners {
		if err := unix.Fchown(ffd, hdr.Uid, hdr.Gid); err != nil {
			f.Close()
			return fmt.Errorf("chown: %w", err)
		}
	}
	if err := unix.Fchmod(ffd, mode); err != nil {
		f.Close()
		return fmt.Errorf("chmod: %w", err)
	}
	if err := a.setXattrs(ffd, hdr); err != nil {
		f.Close()
		return err
	}
	if a.opts.HashFiles {
		var st unix.Stat_t
		if err := unix.Fstat(ffd, &st); err != nil {
			f.Close()
			return fmt.Errorf("stat: %w", err)
		}
		if small != nil {
			a.hasher.submit(st.Ino, small)
			small = nil
		} else {
			a.hasher.set(st.Ino, h.Sum(nil))
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return setTimes(d, leaf, hdr)
}

func (a *Applier) symlink(dir, leaf string, hdr *tar.Header) error {
	d, _, err := a.parent(dir)
	if err != nil {
		return err
	}
	if _, ok, err := lstatAt(d, leaf); err != nil {
		return err
	} else if ok {
		if err := a.remove(d, leaf); err != nil {
			return err
		}
	}
	if err := unix.Symlinkat(hdr.Linkname, fd(d), leaf); err != nil {
		return fmt.Errorf("symlink: %w", err)
	}
	if err := a.chown(d, leaf, hdr); err != nil {
		return err
	}
	return setTimes(d, leaf, hdr)
}

func (a *Applier) hardlink(dir, leaf string, hdr *tar.Header) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("link target %q: %w", hdr.Linkname, err)
	}
	if target == "" {
		return fmt.Errorf("%w: link target %q is the root", ErrBadLink, hdr.Linkname)
	}
	tdir, tleaf := splitName(target)
	td, _, err := a.lookupDir(tdir)
	if err != nil {
		return err
	}
	if td == nil {
		return fmt.Errorf("%w: link target %q does not exist", ErrBadLink, hdr.Linkname)
	}
	tst, ok, err := lstatAt(td, tleaf)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: link target %q does not exist", ErrBadLink, hdr.Linkname)
	}
	if tst.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("%w: link target %q is a directory", ErrBadLink, hdr.Linkname)
	}
	d, _, err := a.parent(dir)
	if err != nil {
		return err
	}
	if st, ok, err := lstatAt(d, leaf); err != nil {
		return err
	} else if ok {
		if st.Dev == tst.Dev && st.Ino == tst.Ino {
			return nil // already that file
		}
		if err := a.remove(d, leaf); err != nil {
			return err
		}
	}
	if err := unix.Linkat(fd(td), tleaf, fd(d), leaf, 0); err != nil {
		return fmt.Errorf("link to %q: %w", hdr.Linkname, err)
	}
	return nil
}

// chown applies the entry's numeric owner to leaf in d (or d itself when
// leaf is ""), without following symlinks.
func (a *Applier) chown(d *os.File, leaf string, hdr *tar.Header) error {
	if !a.opts.PreserveOwners {
		return nil
	}
	var err error
	if leaf == "" {
		err = unix.Fchown(fd(d), hdr.Uid, hdr.Gid)
	} else {
		err = unix.Fchownat(fd(d), leaf, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	return nil
}

// xattrPrefix starts the PAX records that carry extended attributes.
const xattrPrefix = "SCHILY.xattr."

// hasXattrs reports whether hdr carries extended attributes.
func hasXattrs(hdr *tar.Header) bool {
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, xattrPrefix) {
			return true
		}
	}
	return false
}

// setXattrs applies hdr's extended attributes to the open file or
// directory dfd when Options.Xattrs is set.
func (a *Applier) setXattrs(dfd int, hdr *tar.Header) error {
	if !a.opts.Xattrs {
		return nil
	}
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, xattrPrefix)
		if !ok {
			continue
		}
		if name == "" || strings.IndexByte(name, 0) >= 0 {
			return fmt.Errorf("%w: xattr name %q", ErrUnsupportedType, name)
		}
		if err := unix.Fsetxattr(dfd, name, []byte(v), 0); err != nil {
			return fmt.Errorf("set xattr %q: %w", name, err)
		}
	}
	return nil
}

func timespecs(atime, mtime time.Time) []unix.Timespec {
	if atime.IsZero() {
		atime = mtime
	}
	return []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
}

func setTimes(d *os.File, leaf string, hdr *tar.Header) error {
	if err := unix.UtimesNanoAt(fd(d), leaf, timespecs(hdr.AccessTime, hdr.ModTime), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

// addDirMeta records a directory's final mode and times under its
// canonical name; a later entry for the same directory replaces an earlier
// one (the last entry wins, as for everything else).
func (a *Applier) addDirMeta(m dirMeta) {
	if i, ok := a.dirMetaAt[m.name]; ok {
		a.dirMeta[i].skip = true
	}
	a.dirMetaAt[m.name] = len(a.dirMeta)
	a.dirMeta = append(a.dirMeta, m)
}

// finishLayer applies directory modes and times, deepest last-created first.
// A directory removed or replaced later in the layer is skipped.
func (a *Applier) finishLayer() error {
	for i := len(a.dirMeta) - 1; i >= 0; i-- {
		m := a.dirMeta[i]
		if m.skip {
			continue
		}
		if err := a.applyDirMeta(m); err != nil {
			return fmt.Errorf("entry %q: %w", m.name, err)
		}
	}
	a.dirMeta = a.dirMeta[:0]
	a.layerPaths = nil
	return nil
}

func (a *Applier) applyDirMeta(m dirMeta) error {
	var dfd int
	if m.name == "" {
		dfd = fd(a.root)
		if err := unix.Fchmod(dfd, m.mode); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
		if err := unix.UtimesNanoAt(dfd, ".", timespecs(m.atime, m.mtime), 0); err != nil {
			return fmt.Errorf("set times: %w", err)
		}
		return nil
	}
	dir, leaf := splitName(m.name)
	d, _, err := a.lookupDir(dir)
	if err != nil || d == nil {
		return err
	}
	cfd, err := unix.Openat(fd(d), leaf, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer unix.Close(cfd)
	if err := unix.Fchmod(cfd, m.mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if err := unix.UtimesNanoAt(fd(d), leaf, timespecs(m.atime, m.mtime), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

// FileHash returns the sha256 (hex) of the regular file with inode number
// ino as this Applier wrote it, when Options.HashFiles is set. It is meant
// for listing a finished tree without reading it again (release.Scan).
func (a *Applier) FileHash(ino uint64) (string, bool) {
	h, ok := a.hasher.get(ino)
	return h, ok
}

// RuntimeMode is the mode an entry of image mode m (permission bits, sticky,
// setuid, setgid) gets under Options.RuntimeModes, where its owner is the
// user running hbx (root) and not the image's:
//
//   - setuid and setgid are dropped;
//   - group and other get the owner's read and execute bits, in addition to
//     their own: what the image let its owner read or run, executor.user can
//     read or run (0700 becomes 0755, 0600 becomes 0644);
//   - every write bit but the owner's is dropped (0777 becomes 0755, a 1777
//     tmp/ becomes 1755);
//   - the owner's bits and the sticky bit are kept.
//
// Widening is safe because an image's files are public: anyone who can
// pull the reference can read them. Secrets live in the data directory,
// never in a release. RuntimeMode(RuntimeMode(m)) == RuntimeMode(m).
func RuntimeMode(m uint32) uint32 {
	m &= 0o1777
	ownerRX := (m >> 6) & 0o5
	m |= ownerRX<<3 | ownerRX
	return m &^ 0o022
}
