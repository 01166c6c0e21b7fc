package fsat

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// IsMountRoot reports whether path (a symlink at its end is not followed)
// is the root of a mount: a volume or bind mount in a container, where a
// rename of the path itself fails with EBUSY. It asks statx for
// STATX_ATTR_MOUNT_ROOT (Linux 5.8); on an older kernel it compares the
// device of path with that of its parent, which misses a bind mount from
// the same filesystem. Errors are those of statx.
func IsMountRoot(path string) (bool, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &st); err != nil {
		return false, fmt.Errorf("statx %s: %w", path, err)
	}
	if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	var parent unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, filepath.Dir(filepath.Clean(path)), 0, unix.STATX_BASIC_STATS, &parent); err != nil {
		return false, fmt.Errorf("statx %s: %w", filepath.Dir(path), err)
	}
	return st.Dev_major != parent.Dev_major || st.Dev_minor != parent.Dev_minor, nil
}
