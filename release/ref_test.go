package release

import (
	"errors"
	"testing"
)

// TestParseImageRef pins the one image-reference grammar hbx has: the
// installer and the config both call ParseImageRef, so the same string is
// refused by both with the same words.
func TestParseImageRef(t *testing.T) {
	const d = "sha256:e40b2179c005b3124e794e9a8505341db46d0a9a1631e7f3fdcd023462ecf70b"
	r, err := ParseImageRef("oven/bun:1@" + d)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "docker.io/oven/bun" || r.Domain != "docker.io" || r.Path != "oven/bun" || r.Tag != "1" || r.Digest.String() != d {
		t.Errorf("ParseImageRef = %+v", r)
	}
	if c := r.Canonical(); c.Name() != r.Name || c.Digest() != r.Digest || c.String() != r.String() {
		t.Errorf("Canonical() = %s, want %s", c, r)
	}
	for in, want := range map[string]string{
		"":         `image reference "" is empty (want name:tag@sha256:<64 hex>)`,
		"x/y@" + d: `image reference "x/y@` + d + `" has no tag (want name:tag@sha256:<64 hex>)`,
		"x/y:1":    `image reference "x/y:1" has no digest (want name:tag@sha256:<64 hex>)`,
		"x/y":      `image reference "x/y" has no tag and no digest (want name:tag@sha256:<64 hex>)`,
	} {
		_, err := ParseImageRef(in)
		if err == nil || err.Error() != want || !errors.Is(err, ErrBadReference) {
			t.Errorf("ParseImageRef(%q) = %v, want %s (ErrBadReference)", in, err, want)
		}
	}
}

func TestParsePlatform(t *testing.T) {
	for in, want := range map[string]Platform{
		"linux/arm64":    {"linux", "arm64", ""},
		"linux/arm64/v8": {"linux", "arm64", "v8"},
		"linux/amd64":    {"linux", "amd64", ""},
	} {
		p, err := ParsePlatform(in)
		if err != nil || p != want || p.String() != in {
			t.Errorf("ParsePlatform(%q) = %+v, %v; want %+v", in, p, err, want)
		}
	}
	for _, in := range []string{"", "linux", "linux/", "/arm64", "linux/arm64/", "linux/arm64/v8/x", "Linux/arm64", "linux/arm 64"} {
		_, err := ParsePlatform(in)
		want := `platform "` + in + `" is not a platform (want os/arch[/variant], e.g. linux/arm64)`
		if err == nil || err.Error() != want || !errors.Is(err, ErrBadPlatform) {
			t.Errorf("ParsePlatform(%q) = %v, want %s (ErrBadPlatform)", in, err, want)
		}
	}
}

// TestParseTagRef: the digest is optional (hbx resolve's REF), the tag is
// not, and a digest given follows ParseImageRef's rules.
func TestParseTagRef(t *testing.T) {
	const d = "sha256:e40b2179c005b3124e794e9a8505341db46d0a9a1631e7f3fdcd023462ecf70b"
	for in, want := range map[string]ImageRef{
		"ghcr.io/o/x:v1":       {Name: "ghcr.io/o/x", Domain: "ghcr.io", Path: "o/x", Tag: "v1"},
		"ghcr.io/o/x:v1@" + d:  {Name: "ghcr.io/o/x", Domain: "ghcr.io", Path: "o/x", Tag: "v1", Digest: d},
		"127.0.0.1:5000/x:2.0": {Name: "127.0.0.1:5000/x", Domain: "127.0.0.1:5000", Path: "x", Tag: "2.0"},
	} {
		if got, err := ParseTagRef(in); err != nil || got != want {
			t.Errorf("ParseTagRef(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":                `image reference "" is empty (want name:tag or name:tag@sha256:<64 hex>)`,
		"x/y":             `image reference "x/y" has no tag and no digest (want name:tag or name:tag@sha256:<64 hex>)`,
		"x/y@" + d:        `image reference "x/y@` + d + `" has no tag (want name:tag or name:tag@sha256:<64 hex>)`,
		"x/y:1@sha256:ab": `image reference "x/y:1@sha256:ab" is not an image reference: invalid reference format (want name:tag or name:tag@sha256:<64 hex>)`,
	} {
		if _, err := ParseTagRef(in); err == nil || err.Error() != want || !errors.Is(err, ErrBadReference) {
			t.Errorf("ParseTagRef(%q) = %v, want %s (ErrBadReference)", in, err, want)
		}
	}
}
