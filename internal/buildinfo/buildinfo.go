// Package buildinfo holds the version stamped into hbx at link time.
//
// Version and Commit are set with -ldflags -X by the Makefile (`make
// build`, `make cross`). A binary built without them takes what the Go
// toolchain recorded instead: the module version of `go install
// module@version`, the VCS revision of a `go build` in a git checkout
// (-buildvcs, which the Makefile turns off); otherwise they stay "dev"
// and "unknown".
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

var (
	// Version is the release version, from `git describe`.
	Version = "dev"
	// Commit is the short git commit hash the binary was built from.
	Commit = "unknown"
)

func init() {
	bi, ok := debug.ReadBuildInfo()
	if ok {
		Version, Commit = fromBuildInfo(Version, Commit, bi)
	}
}

// fromBuildInfo returns version and commit, each replaced by what bi
// recorded when it is still the unstamped default ("dev", "unknown"):
// the main module's version unless "(devel)", the first 12 characters
// of vcs.revision, with "-dirty" when vcs.modified is true.
func fromBuildInfo(version, commit string, bi *debug.BuildInfo) (string, string) {
	if version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = bi.Main.Version
	}
	if commit != "unknown" {
		return version, commit
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		commit = rev + dirty
	}
	return version, commit
}

// Platform returns the os/arch hbx was built for, e.g. "linux/arm64".
func Platform() string { return runtime.GOOS + "/" + runtime.GOARCH }
