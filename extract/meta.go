package extract

import (
	"archive/tar"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

type dirMeta struct {
	skip  bool   // superseded by a later entry for the same directory
	name  string // canonical
	mode  uint32
	atime time.Time
	mtime time.Time
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

// timespecs is the utimensat argument for an entry's atime (mtime when it
// has none) and mtime: whole seconds from Unix() and nanoseconds from
// Nanosecond(), exact for any time the tar can carry (UnixNano overflows
// outside 1678-2262). A time the filesystem cannot hold is clamped by the
// kernel to the filesystem's range (ext4 with 256-byte inodes: 1901-12-13
// to 2446-05-10), as for GNU tar. Only a 32-bit time_t refuses times past
// 2038 (ERANGE).
func timespecs(atime, mtime time.Time) ([]unix.Timespec, error) {
	if atime.IsZero() {
		atime = mtime
	}
	a, err := unix.TimeToTimespec(atime)
	if err != nil {
		return nil, fmt.Errorf("atime %s: %w", atime.UTC().Format(time.RFC3339), err)
	}
	m, err := unix.TimeToTimespec(mtime)
	if err != nil {
		return nil, fmt.Errorf("mtime %s: %w", mtime.UTC().Format(time.RFC3339), err)
	}
	return []unix.Timespec{a, m}, nil
}

// setTimesAt applies atime and mtime to leaf in dirfd (dirfd itself when
// leaf is "."), never following a symlink.
func setTimesAt(dirfd int, leaf string, atime, mtime time.Time) error {
	ts, err := timespecs(atime, mtime)
	if err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	flags := unix.AT_SYMLINK_NOFOLLOW
	if leaf == "." {
		flags = 0
	}
	if err := unix.UtimesNanoAt(dirfd, leaf, ts, flags); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

func setTimes(d *os.File, leaf string, hdr *tar.Header) error {
	return setTimesAt(fd(d), leaf, hdr.AccessTime, hdr.ModTime)
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
	a.paths.reset()
	return nil
}

func (a *Applier) applyDirMeta(m dirMeta) error {
	var dfd int
	if m.name == "" {
		dfd = fd(a.root)
		if err := unix.Fchmod(dfd, m.mode); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
		return setTimesAt(dfd, ".", m.atime, m.mtime)
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
	return setTimesAt(fd(d), leaf, m.atime, m.mtime)
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
