package upgrade

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hermesbox/hbx/release"
)

// TestUnreadablePreviousIsLeftAlone: a previous that is no symbolic
// link (a directory put there by hand, with a file in it) is not
// recorded as "no previous": the upgrade that fails on it rolls back as
// before (v2 current), and its rollback neither removes nor fails on the
// directory. It used to record none, then fail to remove the directory:
// "rollback failed too", the box left in phase rolling-back for every
// later start to fail on again.
func TestUnreadablePreviousIsLeftAlone(t *testing.T) {
	d, opts, _ := newDisk(t)
	prev := filepath.Join(d.rd, release.PreviousLink)
	d.link(t, release.PreviousLink, nil)
	if err := os.MkdirAll(filepath.Join(prev, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	v3 := rel("3")
	_, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: v3.Image, IndexDigest: v3.IndexDigest}})
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Upgrade() = %v, want %v", err, ErrRolledBack)
	}
	if cur := d.named(release.CurrentLink); cur != "v2" {
		t.Errorf("after Upgrade(): current %q, want v2", cur)
	}
	if _, err := os.Stat(filepath.Join(prev, "keep")); err != nil {
		t.Errorf("the directory at previous was touched: %v", err)
	}
	if j, err := ReadJournal(opts.RuntimeDir); err != nil || j == nil || j.Phase != PhaseRolledBack {
		t.Errorf("journal after Upgrade() = %+v, %v; want phase %s", j, err, PhaseRolledBack)
	}
}
