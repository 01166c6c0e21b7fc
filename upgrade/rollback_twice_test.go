package upgrade

import (
	"context"
	"errors"
	"testing"

	"github.com/hermesbox/hbx/release"
)

// TestRollbackOfARolledBackChangeStaysRefused: a change hbx rollback
// undid is not one that rolled itself back: its Prior (the completed
// change before it) is no rollback target. After a completed upgrade
// v1 -> v2, a completed change back to v1 (an upgrade to an older pin)
// and hbx rollback of it (v2 active, previous v1), a second hbx rollback
// refuses (the last completed change was rolled back already); and an
// upgrade from there that rolls itself back does not bring that change
// back either. Before, the second rollback restored v1 and the archive
// made before v1 -> v2 over the data written since, with a note saying
// the change hbx rollback undid had rolled itself back. The same holds
// when that hbx rollback was killed and a recovery finished it.
func TestRollbackOfARolledBackChangeStaysRefused(t *testing.T) {
	v1, v2, v3 := rel("1"), rel("2"), rel("3")
	for _, tc := range []struct {
		name string
		// failedAfter: an upgrade to v3 that rolls itself back follows
		// the rollback
		failedAfter bool
		// killed: the first hbx rollback dies while restoring and the
		// running supervisor's recovery finishes it
		killed bool
	}{
		{name: "second rollback"},
		{name: "rollback after a failed upgrade that followed it", failedAfter: true},
		{name: "first rollback killed and recovered, then a failed upgrade", failedAfter: true, killed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, opts, _ := newDisk(t)
			done := &Journal{Old: v1, New: v2, Backup: "/b/pre-upgrade-1.tar.gz.gpg"}
			if err := done.write(opts.RuntimeDir, PhaseDone, opts.Now()); err != nil {
				t.Fatal(err)
			}
			d.staged = v1
			if _, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: v1.Image, IndexDigest: v1.IndexDigest}}); err != nil {
				t.Fatalf("Upgrade(v1) = %v", err)
			}
			d.recorded = v2
			var st *diskState
			if tc.killed {
				st = d.killAt(t, "restore")
			}
			if _, err := Rollback(context.Background(), opts); err != nil {
				t.Fatalf("Rollback() of v2 -> v1 = %v", err)
			}
			if tc.killed {
				d.putBack(t, st)
				if _, err := Recover(context.Background(), opts); err != nil {
					t.Fatalf("Recover() of the killed rollback = %v", err)
				}
			}
			if cur, prev := d.named(release.CurrentLink), d.named(release.PreviousLink); cur != "v2" || prev != "v1" {
				t.Fatalf("after the rollback: current %q, previous %q; want v2, v1", cur, prev)
			}
			if tc.failedAfter {
				d.staged, d.failHealth = v3, errors.New("boom")
				if _, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: v3.Image, IndexDigest: v3.IndexDigest}}); !errors.Is(err, ErrRolledBack) {
					t.Fatalf("Upgrade(v3) = %v, want ErrRolledBack", err)
				}
				d.failHealth = nil
			}
			// The archive of v1 -> v2 records v1, as a real one would.
			d.recorded = v1
			_, err := Rollback(context.Background(), opts)
			if !errors.Is(err, ErrNoUpgrade) {
				t.Errorf("second Rollback() = %v, want ErrNoUpgrade", err)
			}
			if cur := d.named(release.CurrentLink); cur != "v2" {
				t.Errorf("after the second Rollback(): current %q, want v2", cur)
			}
		})
	}
}
