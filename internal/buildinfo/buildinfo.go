// Package buildinfo holds the version stamped into hbx at link time.
//
// Version and Commit are set with -ldflags -X by the Makefile; a plain
// `go build` leaves them at "dev" and "unknown".
package buildinfo

import "runtime"

var (
	// Version is the release version, from `git describe`.
	Version = "dev"
	// Commit is the short git commit hash the binary was built from.
	Commit = "unknown"
)

// Platform returns the os/arch hbx was built for, e.g. "linux/arm64".
func Platform() string { return runtime.GOOS + "/" + runtime.GOARCH }
