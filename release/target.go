package release

import (
	"fmt"

	digest "github.com/opencontainers/go-digest"
)

// Target says which release: the image index digest, the platform whose
// child manifest is installed, and that manifest's digest when it is
// pinned. Install, run, health, backup and upgrade all name a release
// with it; config.Config.Release hands out the configured one and
// Meta.Target the one a release records; upgrade's journal and a
// restore's awaited runtime record it as it is (its JSON fields:
// image, index_digest, platform, manifest_digest). Equal says whether two
// name the same release, Check why an installed one is not the
// configured one, String names it for people.
type Target struct {
	// Image is the reference as configured or recorded
	// (name:tag@sha256:<64 hex>); it is carried, not compared: the index
	// digest pins it.
	Image string `json:"image"`
	// IndexDigest is the digest of the image index (or of the single
	// manifest) Image pins.
	IndexDigest digest.Digest `json:"index_digest,omitempty"`
	// Platform is os/arch[/variant].
	Platform string `json:"platform,omitempty"`
	// ManifestDigest is the child manifest of Platform; "" when it is not
	// pinned (the index digest alone then names the release).
	ManifestDigest digest.Digest `json:"manifest_digest,omitempty"`
}

// Equal reports whether t and o are the same release: the same index
// digest and the same manifest digest (a manifest digest names one
// platform's manifest, so the platform follows). Image is not compared:
// the index digest pins it, however the name is spelled.
func (t Target) Equal(o Target) bool {
	return t.IndexDigest == o.IndexDigest && t.ManifestDigest == o.ManifestDigest
}

// String is "image (platform manifest digest)", as messages and
// journals' readers name a release.
func (t Target) String() string {
	return fmt.Sprintf("%s (%s manifest %s)", t.Image, t.Platform, t.ManifestDigest)
}

// Target returns the release m records.
func (m Meta) Target() Target {
	return Target{Image: m.Image, IndexDigest: m.IndexDigest, Platform: m.Platform, ManifestDigest: m.ManifestDigest}
}

// Check returns nil when have is the release t names: the same index
// digest and platform, and the same manifest digest when both name one.
// Otherwise an error wrapping ErrMismatch says which differs, calling
// have "installed" and t "configured" (or "pinned" for the manifest).
func (t Target) Check(have Target) error {
	switch {
	case have.IndexDigest != t.IndexDigest:
		return fmt.Errorf("%w: installed index %s, configured %s", ErrMismatch, have.IndexDigest, t.IndexDigest)
	case have.Platform != t.Platform:
		return fmt.Errorf("%w: installed platform %s, configured %s", ErrMismatch, have.Platform, t.Platform)
	case t.ManifestDigest != "" && have.ManifestDigest != "" && have.ManifestDigest != t.ManifestDigest:
		return fmt.Errorf("%w: installed manifest %s, pinned %s", ErrMismatch, have.ManifestDigest, t.ManifestDigest)
	}
	return nil
}

// On returns t as a box of platform p sees it: t itself when t.Platform is
// p, else the same image on p with no manifest pin (a pin names one
// platform's manifest, so it says nothing about another's). An archive
// written on one platform and restored on another names its release so.
func (t Target) On(p string) Target {
	if t.Platform != p {
		t.Platform, t.ManifestDigest = p, ""
	}
	return t
}
