package upgrade

import (
	"context"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
)

// Installer installs a release for a restore (the method set of
// backup.Runtime): the one image names for platform, pinned to manifest
// when not "", reporting whether the active release changed. ctx carries
// the held lock.
type Installer interface {
	Install(ctx context.Context, image, platform string, manifest digest.Digest) (changed bool, err error)
}

// inPlace is the Installer a rollback hands to Data.Restore for r: a
// release that current already holds is kept, one previous holds is
// activated in place (no network); any other is installed by Runtime,
// configured with r pinned.
type inPlace struct {
	rt Runtime
	r  Release
}

// Install implements Installer; see inPlace.
func (p inPlace) Install(ctx context.Context, image, platform string, manifest digest.Digest) (bool, error) {
	if ref, err := release.ParseImageRef(image); err == nil {
		match := func(r Release) bool {
			return release.Target{IndexDigest: ref.Digest, Platform: platform, ManifestDigest: manifest}.Check(release.Target{IndexDigest: r.Index, Platform: r.Platform, ManifestDigest: r.Manifest}) == nil
		}
		if cur, err := p.rt.Active(); err == nil && match(cur) {
			return false, nil
		}
		if prev, err := p.rt.Previous(); err == nil && match(prev) {
			if err := p.rt.Activate(ctx, prev.Manifest); err != nil {
				return false, err
			}
			return true, nil
		}
	}
	return p.rt.Install(ctx, p.r, image, platform, manifest)
}
