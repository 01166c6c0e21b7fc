// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size (the mount option's form: "64m") on a new
// temporary directory, unmounted when the test ends, and returns it: a
// filesystem that runs out of space at a known size. It needs root
// (Missing otherwise); a root that may not mount (in a container) skips.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		// Not a missing prerequisite: root in a container may not mount.
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}
