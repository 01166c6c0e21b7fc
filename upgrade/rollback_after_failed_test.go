package upgrade

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/release"
)

// TestRollbackAfterSelfRollbackUndoesTheCompletedChange: after a
// completed upgrade v1 -> v2, an upgrade to v3 that fails and rolls
// itself back leaves v2 active and previous on v1, as a refused
// rehearsal would; hbx rollback then undoes the completed change (v1
// and its pre-upgrade data back), and says so. Before, it refused with
// "was rolled back" although previous named v1 and v1's archive was
// there. Without a completed change before the failed one, or after a
// recovery undid it, the refusal says why previous is no rollback
// target and what goes back further.
func TestRollbackAfterSelfRollbackUndoesTheCompletedChange(t *testing.T) {
	v1, v2, v3 := rel("1"), rel("2"), rel("3")
	toV3 := Target{Target: release.Target{Image: v3.Image, IndexDigest: v3.IndexDigest}}
	for _, tc := range []struct {
		name      string
		completed bool // a completed upgrade v1 -> v2 is recorded first
		fails     int  // upgrades to v3 that fail health and roll back
		recovered bool // the last failed change was a recovery's
		wantCur   string
		wantErr   []string // the refusal says each; nil: rolled back
	}{
		{name: "one self-rollback", completed: true, fails: 1, wantCur: "v1"},
		{name: "two self-rollbacks", completed: true, fails: 2, wantCur: "v1"},
		{name: "no completed change before", fails: 1, wantCur: "v2",
			wantErr: []string{"from " + v2.Image + " (the active release) to " + v3.Image + " was rolled back at ", "by the change itself when it failed", "no completed change before it is recorded", "hbx restore ARCHIVE"}},
		{name: "undone by a recovery", completed: true, fails: 1, recovered: true, wantCur: "v2",
			wantErr: []string{"undone by the recovery", "to go back past the completed release change (hbx upgrade) from " + v1.Image + " to " + v2.Image, "hbx restore /b/pre-upgrade-1.tar.gz.gpg"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, opts, _ := newDisk(t)
			if tc.completed {
				done := &Journal{Old: v1, New: v2, Backup: "/b/pre-upgrade-1.tar.gz.gpg"}
				if err := done.write(opts.RuntimeDir, PhaseDone, opts.Now()); err != nil {
					t.Fatal(err)
				}
			}
			d.failHealth = errors.New("boom")
			for range tc.fails {
				if _, err := Upgrade(context.Background(), opts, toV3); !errors.Is(err, ErrRolledBack) {
					t.Fatalf("Upgrade(v3) = %v, want ErrRolledBack", err)
				}
			}
			if cur, prev := d.named(release.CurrentLink), d.named(release.PreviousLink); cur != "v2" || prev != "v1" {
				t.Fatalf("after the failed upgrade: current %q, previous %q; want v2, v1", cur, prev)
			}
			if tc.recovered {
				j, err := ReadJournal(opts.RuntimeDir)
				if err != nil {
					t.Fatal(err)
				}
				j.Recovered = true
				if err := j.write(opts.RuntimeDir, j.Phase, j.Updated); err != nil {
					t.Fatal(err)
				}
			}
			d.failHealth, d.recorded = nil, v1
			res, err := Rollback(context.Background(), opts)
			if cur := d.named(release.CurrentLink); cur != tc.wantCur {
				t.Errorf("after Rollback(): current %q, want %q", cur, tc.wantCur)
			}
			if tc.wantErr != nil {
				if !errors.Is(err, ErrNoUpgrade) {
					t.Fatalf("Rollback() = %v, want ErrNoUpgrade", err)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Rollback() = %q, want it to say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Rollback() = %v, want the completed upgrade v1 -> v2 undone", err)
			}
			if !res.New.Equal(v1.Target) || !res.Old.Equal(v2.Target) || res.Backup != "/b/pre-upgrade-1.tar.gz.gpg" {
				t.Errorf("Rollback() = %s -> %s from %s, want %s -> %s from its pre-upgrade backup", res.Old, res.New, res.Backup, v2, v1)
			}
			if !strings.Contains(strings.Join(res.Notes, "\n"), "rolled itself back") {
				t.Errorf("Rollback() notes %q do not say the last change rolled itself back", res.Notes)
			}
			j, err := ReadJournal(opts.RuntimeDir)
			if err != nil || j.Phase != PhaseRolledBack || !j.Old.Equal(v1.Target) || !j.New.Equal(v2.Target) {
				t.Errorf("journal after Rollback() = %+v, %v; want v1 -> v2 rolled back", j, err)
			}
			if _, err := Rollback(context.Background(), opts); !errors.Is(err, ErrNoUpgrade) {
				t.Errorf("second Rollback() = %v, want ErrNoUpgrade", err)
			}
		})
	}
}
