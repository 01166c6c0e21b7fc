package upgrade

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/release"
)

// TestKilledRollbackOfThePriorChangeStaysUndone: after a completed
// v1 -> v2 and an upgrade to v3 that rolled itself back, hbx rollback
// undoes v1 -> v2 (Journal.Prior); killed while restoring and finished
// by the running supervisor's recovery, that rollback keeps its reason
// ("hbx rollback"), so neither a second hbx rollback nor one after a
// later failed upgrade undoes anything more: v1 stays active (no second
// step back to an archive made before v1).
func TestKilledRollbackOfThePriorChangeStaysUndone(t *testing.T) {
	v1, v3 := rel("1"), rel("3")
	toV3 := Target{Target: release.Target{Image: v3.Image, IndexDigest: v3.IndexDigest}}
	d, opts, _ := newDisk(t)
	done := &Journal{Old: v1, New: rel("2"), Backup: "/b/pre-upgrade-1.tar.gz.gpg"}
	if err := done.write(opts.RuntimeDir, PhaseDone, opts.Now()); err != nil {
		t.Fatal(err)
	}
	d.failHealth = errors.New("boom")
	if _, err := Upgrade(context.Background(), opts, toV3); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Upgrade(v3) = %v, want ErrRolledBack", err)
	}
	d.failHealth, d.recorded = nil, v1
	st := d.killAt(t, "restore")
	if _, err := Rollback(context.Background(), opts); err != nil {
		t.Fatalf("Rollback() of v1 -> v2 = %v", err)
	}
	d.putBack(t, st)
	if _, err := Recover(context.Background(), opts); err != nil {
		t.Fatalf("Recover() of the killed rollback = %v", err)
	}
	if j, err := ReadJournal(opts.RuntimeDir); err != nil || j.Error != rollbackBy || !j.Recovered {
		t.Fatalf("journal after the recovered rollback = %+v, %v; want its reason kept", j, err)
	}
	for _, then := range []string{"second rollback", "rollback after a failed upgrade"} {
		if then == "rollback after a failed upgrade" {
			d.failHealth = errors.New("boom")
			if _, err := Upgrade(context.Background(), opts, toV3); !errors.Is(err, ErrRolledBack) {
				t.Fatalf("Upgrade(v3) from v1 = %v, want ErrRolledBack", err)
			}
			d.failHealth = nil
		}
		_, err := Rollback(context.Background(), opts)
		if !errors.Is(err, ErrNoUpgrade) {
			t.Errorf("%s: Rollback() = %v, want ErrNoUpgrade", then, err)
		} else if then == "second rollback" && !strings.Contains(err.Error(), "undone by hbx rollback (killed, then finished by the recovery)") {
			t.Errorf("%s: Rollback() = %v, want it to say hbx rollback undid it, not a recovery of its own", then, err)
		}
		if cur := d.named(release.CurrentLink); cur != "v1" {
			t.Errorf("%s: current %q, want v1", then, cur)
		}
	}
}
