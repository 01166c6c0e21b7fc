package installer

import (
	"context"
	"time"

	"github.com/hermesbox/hbx/release"
)

// Reactivate makes want the active release from the runtime directory
// alone, with no network, as a rollback's restore needs: it keeps current
// when current holds want, and activates previous (Activate, waiting up
// to wait for the lock unless ctx holds it) when previous does. held
// reports that one of them held want; false means neither did and
// nothing was done (the caller installs want). changed reports that the
// active release changed. A missing or unreadable link is a release that
// does not hold want.
func Reactivate(ctx context.Context, runtimeDir string, want release.Target, wait time.Duration) (held, changed bool, err error) {
	if cur, err := release.Link(runtimeDir, release.CurrentLink); err == nil && want.Check(cur.Meta.Target()) == nil {
		return true, false, nil
	}
	prev, err := release.Link(runtimeDir, release.PreviousLink)
	if err != nil || want.Check(prev.Meta.Target()) != nil {
		return false, false, nil
	}
	if err := Activate(ctx, runtimeDir, prev.Meta.ManifestDigest, wait); err != nil {
		return true, false, err
	}
	return true, true, nil
}
