package extract

import (
	"archive/tar"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"os"
	"strings"

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
	// HashFiles records a sha256 of every regular file written, for
	// FileHash.
	HashFiles bool
	// SpillDir, when set, is a directory outside the root where what
	// Apply must remember per entry goes in sorted runs (unlinked files,
	// freed on Close or when the process dies): the recorded hashes
	// (HashFiles) and the current layer's names (for whiteouts), so
	// memory does not grow with the number of entries. "" keeps them in
	// memory: 40 bytes a file for hashes and about 35 bytes a name of the
	// current layer.
	SpillDir string
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
	paths     *pathSet // names this layer created or passed through
	pathSeeds [2]maphash.Seed
	dirMeta   []dirMeta
	dirMetaAt map[string]int // canonical name -> index in dirMeta of its latest entry

	// TrackChanges: the directories changed since, by canonical name
	changed     map[string]struct{} // nil: not tracking
	changeLimit int
	changeLost  bool // more than changeLimit: every directory counts as changed
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
		hasher:    newHasher(opts.SpillDir),
		paths:     newPathSet(opts.SpillDir),
		pathSeeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
	}, nil
}

// Close releases the root and cached directory handles.
func (a *Applier) Close() error {
	a.hasher.close()
	a.paths.close()
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
	a.paths.reset()
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
