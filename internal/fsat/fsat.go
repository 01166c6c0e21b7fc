// Package fsat holds the small *at system-call helpers that several
// packages need when they work on directory handles instead of joined path
// strings (extract, release, backup), and MkdirAll, whose new directories
// get their mode whatever the umask. Linux only.
package fsat

import "golang.org/x/sys/unix"

// maxLink is the longest symlink target Readlink reads (bytes); Linux
// stores at most PATH_MAX (4096).
const maxLink = 64 << 10

// Readlink returns the target of the symlink name in the directory open as
// dirfd (readlinkat(2)), whatever its length up to 64 KiB; longer targets
// fail with ENAMETOOLONG. name is not followed.
func Readlink(dirfd int, name string) (string, error) {
	for size := 256; size <= maxLink; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
	return "", unix.ENAMETOOLONG
}
