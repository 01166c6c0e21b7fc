package upgrade

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/release"
)

// TestRollbackAfterARecoveryClosedTheChangeRefuses: an upgrade killed
// before activation (after staging, after its backup) that followed a
// completed v1 -> v2 is closed by whichever recovery comes first, putting
// v1 -> v2's journal back. When hbx rollback closes it, that is the
// rollback asked for (TestRollbackOfChangeInterruptedBeforeActivationKeepsThePriorOne);
// when the running supervisor's recovery wins the race (about a second
// after the kill), hbx rollback must not go on to undo v1 -> v2 either:
// it refuses, naming the closed change and the archive that goes back
// past v1 -> v2, as after a recovery's rollback. Before, the outcome of
// one hbx rollback after a killed upgrade hung on that race: nothing
// undone, or v1 -> v2 undone and its pre-upgrade archive restored over
// the data written since.
func TestRollbackAfterARecoveryClosedTheChangeRefuses(t *testing.T) {
	v1, v2, v3 := rel("1"), rel("2"), rel("3")
	const archive = "/b/pre-upgrade-1.tar.gz.gpg"
	for _, tc := range []struct {
		name, step string
		// first: the recovery that closes the killed change
		first func(context.Context, Options) error
	}{
		{name: "supervisor closes it after staging", step: "backup", first: func(ctx context.Context, opts Options) error { _, err := Recover(ctx, opts); return err }},
		{name: "supervisor closes it after its backup", step: "wait-never", first: func(ctx context.Context, opts Options) error { _, err := Recover(ctx, opts); return err }},
		{name: "hbx rollback closes it, then a second one", step: "backup", first: func(ctx context.Context, opts Options) error {
			res, err := Rollback(ctx, opts)
			if err == nil && !res.Interrupted {
				return errors.New("the first Rollback() did not close the interrupted change")
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, opts, _ := newDisk(t)
			done := &Journal{Old: v1, New: v2, Backup: archive}
			if err := done.write(opts.RuntimeDir, PhaseDone, opts.Now()); err != nil {
				t.Fatal(err)
			}
			if tc.step == "wait-never" {
				// killed right after its backup: the journal says backed-up
				j := &Journal{Old: v2, New: v3, Backup: "/b/pre-upgrade-2.tar.gz.gpg", Prior: done}
				if err := j.write(opts.RuntimeDir, PhaseBackedUp, opts.Now()); err != nil {
					t.Fatal(err)
				}
			} else {
				st := d.killAt(t, tc.step)
				_, _ = Upgrade(context.Background(), opts, Target{Target: release.Target{Image: v3.Image, IndexDigest: v3.IndexDigest}})
				d.putBack(t, st)
			}
			if err := tc.first(context.Background(), opts); err != nil {
				t.Fatalf("closing the killed change = %v", err)
			}
			d.recorded = v1
			_, err := Rollback(context.Background(), opts)
			if !errors.Is(err, ErrNoUpgrade) || !strings.Contains(err.Error(), "hbx restore "+archive) || !strings.Contains(err.Error(), v3.Image) {
				t.Errorf("Rollback() = %v, want ErrNoUpgrade naming the closed change to v3 and hbx restore %s", err, archive)
			}
			if cur, prev := d.named(release.CurrentLink), d.named(release.PreviousLink); cur != "v2" || prev != "v1" {
				t.Errorf("after Rollback(): current %q, previous %q; want v2, v1", cur, prev)
			}
		})
	}
}
