package upgrade

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
)

// TestRollbackOfChangeInterruptedBeforeActivationKeepsThePriorOne: hbx
// rollback on a change interrupted before activation (staged, backed up)
// that followed a completed upgrade closes the interrupted one, which puts
// the completed one's journal back, and stops there: that was the
// rollback asked for (hbx install, refused while the change is unfinished,
// says `hbx rollback` undoes it). Before, it went on to roll back the
// completed upgrade too: its pre-upgrade backup restored over the data
// written since, the release before it activated.
func TestRollbackOfChangeInterruptedBeforeActivationKeepsThePriorOne(t *testing.T) {
	v3 := Release{Target: release.Target{Image: "r/e:v3@" + string(digest.FromString("i3")), Platform: "linux/amd64", IndexDigest: digest.FromString("i3"), ManifestDigest: digest.FromString("m3")}}
	for _, phase := range []Phase{PhaseStaged, PhaseBackedUp} {
		t.Run(string(phase), func(t *testing.T) {
			f, opts := newFake(t)
			if _, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}}); err != nil {
				t.Fatal(err)
			}
			done, err := ReadJournal(opts.RuntimeDir)
			if err != nil || done == nil || done.Phase != PhaseDone {
				t.Fatalf("journal after the upgrade = %+v, %v", done, err)
			}
			// The next change, to v3, dies before activation.
			j := &Journal{Old: newRel, New: v3, Backup: "/b/pre-upgrade-2.tar.gz.gpg", Prior: done}
			if err := j.write(opts.RuntimeDir, phase, opts.Now()); err != nil {
				t.Fatal(err)
			}
			// The completed upgrade's journal comes back, naming the
			// closed change (hbx rollback then refuses to undo it too:
			// TestRollbackAfterARecoveryClosedTheChangeRefuses).
			want := *done
			want.ClosedNext = j.describe()
			f.calls = nil
			opts.Services = nil
			res, err := Rollback(context.Background(), opts)
			if err != nil {
				t.Fatalf("Rollback() = %v", err)
			}
			if len(f.calls) != 0 || !f.cur.Equal(newRel.Target) {
				t.Errorf("Rollback() made calls %q, active %s: want none, %s still active", f.calls, f.cur, newRel)
			}
			if !res.Interrupted || !strings.Contains(res.Recovered, "interrupted before activation") || !res.Old.Equal(v3.Target) || !res.New.Equal(newRel.Target) {
				t.Errorf("Rollback() = %+v, want the interrupted change to %s closed, %s active", res, v3, newRel)
			}
			got, err := ReadJournal(opts.RuntimeDir)
			if err != nil || got == nil {
				t.Fatalf("journal after Rollback = %+v, %v", got, err)
			}
			if diff := cmp.Diff(got, &want); diff != "" {
				t.Errorf("journal after Rollback (-got +want, the completed upgrade's):\n%s", diff)
			}
		})
	}
}
