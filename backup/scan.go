package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hermesbox/hbx/internal/fsat"

	"golang.org/x/sys/unix"
)

// fileID identifies a file: device and inode.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), uint64(st.Ino)} }

// root is one archived directory tree.
type root struct {
	host string   // absolute host path, as configured
	arch string   // archive path of the root: "." or ".hbx-paths/a/b"
	dir  *os.File // the open directory
	id   fileID
}

// item is one archive entry as scanned: its manifest entry plus what the
// tar header and the second read need.
type item struct {
	File
	root   int    // index in scanner.roots
	rel    string // path below the root, "" for the root itself
	uid    int
	gid    int
	mtime  time.Time
	xattrs map[string]string
	id     fileID
}

// scanner walks the roots without following symlinks (every step is an
// *at call on a directory descriptor) and, with hash set, reads every
// regular file once for its sha256 and extended attributes, in parallel.
type scanner struct {
	roots   []*root
	exclude map[fileID]string // directories never archived, with why
	hash    bool

	items   []*item
	links   map[fileID]int // first item index of each multiply linked file
	skipped []string       // host paths left out, with why: excluded directories, sockets, fifos, devices
	left    []File         // the sockets, fifos and devices among them, by archive path
	bytes   int64          // regular file content bytes
	files   int

	sem  chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	werr error
}

// openRoots opens the data directory and the extra paths.
func openRoots(dataDir string, paths []string) ([]*root, error) {
	var roots []*root
	add := func(host, arch string) error {
		fd, err := unix.Open(host, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", host, err)
		}
		f := os.NewFile(uintptr(fd), host)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			f.Close()
			return fmt.Errorf("stat %s: %w", host, err)
		}
		roots = append(roots, &root{host: host, arch: arch, dir: f, id: idOf(&st)})
		return nil
	}
	if err := add(dataDir, "."); err != nil {
		return nil, err
	}
	for _, p := range paths {
		if err := add(p, extraArchPath(p)); err != nil {
			closeRoots(roots)
			return nil, err
		}
	}
	return roots, nil
}

// extraArchPath is the archive path of extra directory p.
func extraArchPath(p string) string { return path.Join(PathsPrefix, filepath.ToSlash(p)[1:]) }

func closeRoots(roots []*root) {
	for _, r := range roots {
		r.dir.Close()
	}
}

// scan walks every root. Items come out in a deterministic order: roots in
// order, each depth first with names sorted, a directory before its
// children.
func scan(roots []*root, exclude map[fileID]string, hash bool) (*scanner, error) {
	s := &scanner{roots: roots, exclude: exclude, hash: hash, links: map[fileID]int{}, sem: make(chan struct{}, 2*runtime.GOMAXPROCS(0))}
	var err error
	for i, r := range roots {
		if err = s.walkRoot(i, r); err != nil {
			break
		}
	}
	s.wg.Wait()
	if err == nil {
		err = s.werr
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *scanner) walkRoot(i int, r *root) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd(r.dir), &st); err != nil {
		return fmt.Errorf("stat %s: %w", r.host, err)
	}
	it := s.newItem(i, "", r.arch, TypeDir, &st)
	if s.hash {
		x, err := readXattrs(fd(r.dir))
		if err != nil {
			return fmt.Errorf("%s: %w", r.host, err)
		}
		it.xattrs = x
	}
	if _, err := r.dir.Seek(0, io.SeekStart); err != nil { // an earlier scan read it
		return fmt.Errorf("rewind %s: %w", r.host, err)
	}
	return s.walkDir(i, r.dir, "", r.arch)
}

func (s *scanner) newItem(root int, rel, arch, typ string, st *unix.Stat_t) *item {
	it := &item{
		File:  File{Path: arch, Type: typ, Mode: uint32(st.Mode) & 0o7777},
		root:  root,
		rel:   rel,
		uid:   int(st.Uid),
		gid:   int(st.Gid),
		mtime: time.Unix(st.Mtim.Unix()).UTC(),
		id:    idOf(st),
	}
	s.items = append(s.items, it)
	return it
}

// walkDir adds the entries of directory d (root i's rel, archive path
// arch), names sorted, each directory's before its children.
func (s *scanner) walkDir(i int, d *os.File, rel, arch string) error {
	host := filepath.Join(s.roots[i].host, rel)
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list %s: %w", host, err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := s.walkEntry(i, d, name, path.Join(rel, name), path.Join(arch, name), filepath.Join(host, name)); err != nil {
			return err
		}
	}
	return nil
}

// walkEntry adds entry name of d: excluded ones and those of a type not
// archived are skipped (and said), a directory is walked.
func (s *scanner) walkEntry(i int, d *os.File, name, crel, carch, chost string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(fd(d), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("lstat %s: %w", chost, err)
	}
	if why, ok := s.exclude[idOf(&st)]; ok {
		s.skipped = append(s.skipped, shown(chost)+" ("+why+")")
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return s.walkSubdir(i, d, name, crel, carch, chost, &st)
	case unix.S_IFREG:
		return s.addFile(i, d, name, crel, carch, chost, &st)
	case unix.S_IFLNK:
		target, err := fsat.Readlink(fd(d), name)
		if err != nil {
			return fmt.Errorf("readlink %s: %w", chost, err)
		}
		it := s.newItem(i, crel, carch, TypeSymlink, &st)
		it.Link = target
	default:
		typ := kindOf(st.Mode)
		s.skipped = append(s.skipped, shown(chost)+" ("+typ+")")
		s.left = append(s.left, File{Path: carch, Type: typ, Mode: uint32(st.Mode) & 0o7777})
	}
	return nil
}

// walkSubdir opens directory name of d without following a symlink, adds
// it (with its xattrs when hashing) and walks it.
func (s *scanner) walkSubdir(i int, d *os.File, name, crel, carch, chost string, st *unix.Stat_t) error {
	cfd, err := unix.Openat(fd(d), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", chost, err)
	}
	c := os.NewFile(uintptr(cfd), chost)
	defer c.Close()
	it := s.newItem(i, crel, carch, TypeDir, st)
	if s.hash {
		if it.xattrs, err = readXattrs(cfd); err != nil {
			return fmt.Errorf("%s: %w", chost, err)
		}
	}
	return s.walkDir(i, c, crel, carch)
}

// addFile adds regular file name of d: a hardlink to an earlier file of
// the same root, or a file (hashed when hashing).
func (s *scanner) addFile(i int, d *os.File, name, crel, carch, chost string, st *unix.Stat_t) error {
	if st.Nlink > 1 {
		if first, ok := s.links[idOf(st)]; ok && s.items[first].root == i {
			it := s.newItem(i, crel, carch, TypeHardlink, st)
			it.Link = s.items[first].Path
			return nil
		}
		s.links[idOf(st)] = len(s.items)
	}
	it := s.newItem(i, crel, carch, TypeFile, st)
	it.Size = st.Size
	s.files++
	s.bytes += st.Size
	if s.hash {
		return s.hashFile(d, name, chost, it)
	}
	return nil
}

// shown returns a host path for messages: as it is when it is valid
// UTF-8, Go-quoted otherwise (so JSON output does not turn its bytes into
// U+FFFD).
func shown(p string) string {
	if utf8.ValidString(p) {
		return p
	}
	return strconv.Quote(p)
}

// kindOf names the file type of mode for what is not archived.
func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return TypeFifo
	case unix.S_IFSOCK:
		return TypeSocket
	case unix.S_IFCHR:
		return TypeCharDevice
	case unix.S_IFBLK:
		return TypeBlockDevice
	}
	return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
}

// bufPool holds the copy buffers of hashing and archiving.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// hashFile opens name in d now and hashes it on a worker goroutine.
func (s *scanner) hashFile(d *os.File, name, host string, it *item) error {
	ffd, err := unix.Openat(fd(d), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", host, err)
	}
	f := os.NewFile(uintptr(ffd), host)
	s.sem <- struct{}{}
	s.wg.Add(1)
	go func() {
		defer func() { <-s.sem; s.wg.Done() }()
		err := hashInto(f, it)
		f.Close()
		if err != nil {
			s.mu.Lock()
			if s.werr == nil {
				s.werr = fmt.Errorf("read %s: %w", host, err)
			}
			s.mu.Unlock()
		}
	}()
	return nil
}

// hashInto reads f, which must still be the file it.id names with it.Size
// bytes, for its sha256 and extended attributes.
func hashInto(f *os.File, it *item) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd(f), &st); err != nil {
		return err
	}
	if idOf(&st) != it.id || st.Size != it.Size {
		return errChanged
	}
	h := sha256.New()
	bp := bufPool.Get().(*[]byte)
	n, err := io.CopyBuffer(h, f, *bp)
	bufPool.Put(bp)
	if err != nil {
		return err
	}
	if n != it.Size {
		return errChanged
	}
	it.SHA256 = hex.EncodeToString(h.Sum(nil))
	x, err := readXattrs(fd(f))
	if err != nil {
		return err
	}
	it.xattrs = x
	return nil
}

// errChanged: a file changed between two reads of one backup, although
// the services were stopped.
var errChanged = errors.New("changed while being archived (is something still writing?)")

// readXattrs returns the extended attributes of the open file or
// directory fd, nil when it has none.
func readXattrs(fd int) (map[string]string, error) {
	size, err := unix.Flistxattr(fd, nil)
	if errors.Is(err, unix.ENOTSUP) || size == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list xattrs: %w", err)
	}
	buf := make([]byte, size)
	size, err = unix.Flistxattr(fd, buf)
	if err != nil {
		return nil, fmt.Errorf("list xattrs: %w", err)
	}
	out := map[string]string{}
	for _, name := range splitNul(buf[:size]) {
		n, err := unix.Fgetxattr(fd, name, nil)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get xattr %q: %w", name, err)
		}
		v := make([]byte, n)
		if n, err = unix.Fgetxattr(fd, name, v); err != nil {
			return nil, fmt.Errorf("get xattr %q: %w", name, err)
		}
		out[name] = string(v[:n])
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func splitNul(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		if i > 0 {
			out = append(out, string(b[:i]))
		}
		if i == len(b) {
			break
		}
		b = b[i+1:]
	}
	return out
}

func fd(f *os.File) int { return int(f.Fd()) }

// openBeneath opens rel below the directory dirfd for reading without
// following any symlink on the way (openat2 RESOLVE_NO_SYMLINKS, or one
// O_NOFOLLOW openat per component on kernels without openat2).
func openBeneath(dirfd int, rel string) (*os.File, error) {
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	nfd, err := unix.Openat2(dirfd, rel, &how)
	if err == nil {
		return os.NewFile(uintptr(nfd), rel), nil
	}
	if !errors.Is(err, unix.ENOSYS) {
		return nil, err
	}
	cur := dirfd
	dir, leaf := path.Split(rel)
	for _, c := range splitPath(dir) {
		next, err := unix.Openat(cur, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if cur != dirfd {
			unix.Close(cur)
		}
		if err != nil {
			return nil, err
		}
		cur = next
	}
	nfd, err = unix.Openat(cur, leaf, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if cur != dirfd {
		unix.Close(cur)
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(nfd), rel), nil
}

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}
