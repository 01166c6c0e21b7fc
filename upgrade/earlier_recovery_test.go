package upgrade

import (
	"context"
	"errors"
	"testing"

	"github.com/hermesbox/hbx/release"
)

// TestRollbackFinishedByAnEarlierRecoveryStaysUndone: an hbx before this
// one recorded the recovery that finished a killed hbx rollback as
// "interrupted during rolling-back" (it did not keep the reason the
// rollback began for), so such a journal cannot be told from a recovered
// self-rollback. Its Prior (the completed change before the undone one)
// is no rollback target: after v1 -> v2, an upgrade back to v1 (an older
// pin) and hbx rollback of it killed mid-restore and finished by that
// earlier recovery (v2 active, previous v1), a later upgrade to v3 that
// rolls itself back must not carry v1 -> v2 as its Prior, and hbx
// rollback must refuse, not restore the archive made before v1 -> v2
// over the data written since (undoing a second change). Before, it did.
func TestRollbackFinishedByAnEarlierRecoveryStaysUndone(t *testing.T) {
	v1, v3 := rel("1"), rel("3")
	for _, tc := range []struct {
		name string
		then func(*testing.T, *diskRuntime, Options)
	}{
		{name: "rollback right after", then: func(*testing.T, *diskRuntime, Options) {}},
		{name: "rollback after a failed upgrade", then: func(t *testing.T, d *diskRuntime, opts Options) {
			d.staged, d.failHealth = v3, errors.New("boom")
			if _, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: v3.Image, IndexDigest: v3.IndexDigest}}); !errors.Is(err, ErrRolledBack) {
				t.Fatalf("Upgrade(v3) = %v, want ErrRolledBack", err)
			}
			d.failHealth = nil
			if j, err := ReadJournal(opts.RuntimeDir); err != nil || j.Prior != nil {
				t.Errorf("journal of the failed upgrade = %+v, %v; want no Prior (v1 -> v2 was undone already)", j, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, opts, _ := newDisk(t)
			undoneByEarlierRecovery(t, d, opts)
			tc.then(t, d, opts)
			d.recorded = v1 // the archive of v1 -> v2 records v1
			if _, err := Rollback(context.Background(), opts); !errors.Is(err, ErrNoUpgrade) {
				t.Errorf("Rollback() = %v, want ErrNoUpgrade", err)
			}
			if cur := d.named(release.CurrentLink); cur != "v2" {
				t.Errorf("after Rollback(): current %q, want v2", cur)
			}
		})
	}
}

// undoneByEarlierRecovery leaves d as an hbx before this one did: v1 ->
// v2 completed, v2 -> v1 completed, hbx rollback of it killed while
// restoring and finished by a recovery that recorded "interrupted during
// rolling-back".
func undoneByEarlierRecovery(t *testing.T, d *diskRuntime, opts Options) {
	t.Helper()
	v1, v2 := rel("1"), rel("2")
	done := &Journal{Old: v1, New: v2, Backup: "/b/pre-upgrade-1.tar.gz.gpg"}
	if err := done.write(opts.RuntimeDir, PhaseDone, opts.Now()); err != nil {
		t.Fatal(err)
	}
	d.staged = v1
	if _, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: v1.Image, IndexDigest: v1.IndexDigest}}); err != nil {
		t.Fatalf("Upgrade(v1) = %v", err)
	}
	d.recorded = v2
	st := d.killAt(t, "restore")
	if _, err := Rollback(context.Background(), opts); err != nil {
		t.Fatalf("Rollback() of v2 -> v1 = %v", err)
	}
	d.putBack(t, st)
	if _, err := Recover(context.Background(), opts); err != nil {
		t.Fatalf("Recover() of the killed rollback = %v", err)
	}
	j, err := ReadJournal(opts.RuntimeDir)
	if err != nil || j.Phase != PhaseRolledBack || !j.Recovered {
		t.Fatalf("journal of the recovered rollback = %+v, %v", j, err)
	}
	// What the earlier recovery recorded instead of the reason.
	j.Error = "interrupted during " + string(PhaseRollingBack)
	if err := j.write(opts.RuntimeDir, j.Phase, j.Updated); err != nil {
		t.Fatal(err)
	}
	if cur, prev := d.named(release.CurrentLink), d.named(release.PreviousLink); cur != "v2" || prev != "v1" {
		t.Fatalf("after the recovered rollback: current %q, previous %q; want v2, v1", cur, prev)
	}
}
