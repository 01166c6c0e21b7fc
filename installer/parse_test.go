package installer

import (
	"errors"
	"testing"

	"github.com/hermesbox/hbx/internal/config"
)

// TestParsersAgreeWithConfig: the installer parses image references and
// platforms with the same grammar and words as the configuration (one
// parser, release's), so a value the config refuses never reaches a
// registry, and one it accepts is never refused here.
func TestParsersAgreeWithConfig(t *testing.T) {
	const d = "sha256:e40b2179c005b3124e794e9a8505341db46d0a9a1631e7f3fdcd023462ecf70b"
	for _, s := range []string{
		"ghcr.io/o/executor:v1@" + d, "oven/bun:1@" + d, "127.0.0.1:5000/x/y:t@" + d,
		"", "x/y@" + d, "x/y:1", "x/y", "X/Y:1@" + d, "x/y:1@sha256:abc",
	} {
		_, ierr := ParseReference(s)
		_, cerr := config.ParseImageRef(s)
		if (ierr == nil) != (cerr == nil) || ierr != nil && (!errors.Is(ierr, ErrBadReference) || !errors.Is(cerr, config.ErrInvalid) || ierr.Error() != cerr.Error()) {
			t.Errorf("reference %q: installer %v, config %v", s, ierr, cerr)
		}
	}
	for _, s := range []string{
		"linux/arm64", "linux/arm64/v8", "linux/amd64",
		"", "linux", "linux/", "linux/arm64/", "Linux/arm64", "linux/arm 64", "linux/arm64/v8/x",
	} {
		p, ierr := ParsePlatform(s)
		_, _, _, cerr := config.ParsePlatform(s)
		if (ierr == nil) != (cerr == nil) || ierr != nil && ierr.Error() != cerr.Error() || ierr == nil && p.String() != s {
			t.Errorf("platform %q: installer %v (%s), config %v", s, ierr, p, cerr)
		}
	}
}
