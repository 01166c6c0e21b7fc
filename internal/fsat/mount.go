package fsat

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// ErrOtherMount is the error of a walk that meets an entry on another
// mount than the directory it started from: a mount point below it
// (a bind mount of another tree, or another filesystem), which a walk
// meant for one directory's own entries never crosses.
var ErrOtherMount = errors.New("a mount point (another mount than its parent's), not crossed")

// Lstatx is statx(2) of name in the directory open as dirfd without
// following a symlink at its end; name "" describes dirfd itself
// (AT_EMPTY_PATH). It asks for the basic fields and the mount id.
func Lstatx(dirfd int, name string) (unix.Statx_t, error) {
	var st unix.Statx_t
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_SYNC_AS_STAT
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	err := unix.Statx(dirfd, name, flags, unix.STATX_BASIC_STATS|unix.STATX_MNT_ID, &st)
	if err != nil {
		return st, &os.PathError{Op: "statx", Path: name, Err: err}
	}
	return st, nil
}

// OnOtherMount reports whether st (from Lstatx) lies on another mount
// than ref, the directory a walk started from: a different device, a
// different mount id (Linux 5.8; a bind mount from the same filesystem
// has the same device), or st is itself the root of a mount
// (STATX_ATTR_MOUNT_ROOT, Linux 5.8). On an older kernel only the device
// is compared, which misses a bind mount from the same filesystem.
func OnOtherMount(st, ref *unix.Statx_t) bool {
	if st.Dev_major != ref.Dev_major || st.Dev_minor != ref.Dev_minor {
		return true
	}
	if st.Mask&ref.Mask&unix.STATX_MNT_ID != 0 && st.Mnt_id != ref.Mnt_id {
		return true
	}
	return st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}
