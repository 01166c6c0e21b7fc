package upgrade

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hermesbox/hbx/release"
)

// diskState is what a kill -9 leaves of a change on d: the journal and
// where current and previous point.
type diskState struct {
	journal []byte
	links   map[string]string
}

// killAt makes the next change on d die when step begins (fake.at): the
// disk as it stood then is what putBack restores once the call under
// test returns.
func (d *diskRuntime) killAt(t *testing.T, step string) *diskState {
	t.Helper()
	st := &diskState{links: map[string]string{}}
	d.at = func(s string) {
		if s != step || st.journal != nil {
			return
		}
		b, err := os.ReadFile(journalPath(d.rd))
		if err != nil {
			t.Errorf("read the journal at %s: %v", step, err)
		}
		st.journal = b
		for _, l := range []string{release.CurrentLink, release.PreviousLink} {
			st.links[l], _ = os.Readlink(filepath.Join(d.rd, l))
		}
	}
	return st
}

// putBack leaves d as the kill st recorded left it.
func (d *diskRuntime) putBack(t *testing.T, st *diskState) {
	t.Helper()
	d.at = nil
	if st.journal == nil {
		t.Fatal("the change never reached the step it was to die at")
	}
	if err := os.WriteFile(journalPath(d.rd), st.journal, 0o644); err != nil {
		t.Fatal(err)
	}
	for l, target := range st.links {
		p := filepath.Join(d.rd, l)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if target != "" {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestPriorOutlivesChangesThatDidNotComplete: after a completed upgrade
// v1 -> v2, a change to v3 that ends without completing, in every way one
// can (rolled back by itself, aborted, refused by its rehearsal, killed
// at each phase and undone by the running supervisor's recovery or by hbx
// rollback), leaves v1 -> v2 the last completed change: a later upgrade
// that rolls itself back carries it as its Prior (its pre-upgrade backup
// spares that one's archive), and hbx rollback then undoes it (v1 and its pre-upgrade archive back). Before, a change a
// recovery had undone after activation broke the chain: the later one had
// no Prior and hbx rollback refused "no completed change before it is
// recorded" though v1 -> v2's archive was there.
func TestPriorOutlivesChangesThatDidNotComplete(t *testing.T) {
	v1, v2, v3 := rel("1"), rel("2"), rel("3")
	toV3 := Target{Target: release.Target{Image: v3.Image, IndexDigest: v3.IndexDigest}}
	const archive = "/b/pre-upgrade-1.tar.gz.gpg"
	boom := errors.New("boom")
	// killed runs the change to v3 to its end, dying at step, then the
	// recovery (undo) on the disk the kill left.
	killed := func(step string, fails bool, undo func(*testing.T, Options) error) func(*testing.T, *diskRuntime, Options) {
		return func(t *testing.T, d *diskRuntime, opts Options) {
			st := d.killAt(t, step)
			if fails {
				d.failHealth = boom
			}
			_, _ = Upgrade(context.Background(), opts, toV3)
			d.failHealth = nil
			d.putBack(t, st)
			if err := undo(t, opts); err != nil {
				t.Fatalf("recovery of the change killed at %s = %v", step, err)
			}
		}
	}
	supervisor := func(_ *testing.T, opts Options) error { _, err := Recover(context.Background(), opts); return err }
	rollback := func(t *testing.T, opts Options) error {
		res, err := Rollback(context.Background(), opts)
		if err == nil && !res.Interrupted {
			t.Errorf("Rollback() = %+v, want the interrupted change undone", res)
		}
		return err
	}
	for _, tc := range []struct {
		name string
		end  func(*testing.T, *diskRuntime, Options)
	}{
		{name: "rolled back by itself", end: func(t *testing.T, d *diskRuntime, opts Options) {
			d.failHealth = boom
			if _, err := Upgrade(context.Background(), opts, toV3); !errors.Is(err, ErrRolledBack) {
				t.Fatalf("Upgrade(v3) = %v, want ErrRolledBack", err)
			}
			d.failHealth = nil
		}},
		{name: "aborted", end: func(t *testing.T, d *diskRuntime, opts Options) {
			d.failBackup = boom
			if _, err := Upgrade(context.Background(), opts, toV3); !errors.Is(err, boom) {
				t.Fatalf("Upgrade(v3) = %v, want the backup's failure", err)
			}
			d.failBackup = nil
		}},
		{name: "refused by its rehearsal", end: func(t *testing.T, _ *diskRuntime, opts Options) {
			opts.Rehearse = func(context.Context, Release) (string, error) { return "", boom }
			if _, err := Upgrade(context.Background(), opts, toV3); !errors.Is(err, boom) {
				t.Fatalf("Upgrade(v3) = %v, want the rehearsal's refusal", err)
			}
		}},
		{name: "killed after staging, recovered", end: killed("backup", false, supervisor)},
		{name: "killed during the health wait, recovered", end: killed("wait", false, supervisor)},
		{name: "killed while rolling itself back, recovered", end: killed("restore", true, supervisor)},
		{name: "killed during the health wait, undone by hbx rollback", end: killed("wait", false, rollback)},
		{name: "killed twice, recovered", end: func(t *testing.T, d *diskRuntime, opts Options) {
			killed("wait", false, supervisor)(t, d, opts)
			killed("wait", false, supervisor)(t, d, opts)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, opts, _ := newDisk(t)
			done := &Journal{Old: v1, New: v2, Backup: archive}
			if err := done.write(opts.RuntimeDir, PhaseDone, opts.Now()); err != nil {
				t.Fatal(err)
			}
			tc.end(t, d, opts)
			if cur, prev := d.named(release.CurrentLink), d.named(release.PreviousLink); cur != "v2" || prev != "v1" {
				t.Fatalf("after the change that did not complete: current %q, previous %q; want v2, v1", cur, prev)
			}
			d.failHealth, d.spared = boom, nil
			if _, err := Upgrade(context.Background(), opts, toV3); !errors.Is(err, ErrRolledBack) {
				t.Fatalf("later Upgrade(v3) = %v, want ErrRolledBack", err)
			}
			d.failHealth = nil
			if !slices.Equal(d.spared, []string{archive}) {
				t.Errorf("the later change's backup spared %q, want v1 -> v2's %s", d.spared, archive)
			}
			if j, err := ReadJournal(opts.RuntimeDir); err != nil || j.Prior == nil || j.Prior.Backup != archive || !j.Prior.New.Equal(v2.Target) {
				t.Errorf("journal of the later change = %+v, %v; want Prior v1 -> v2 with %s", j, err, archive)
			}
			d.recorded = v1
			res, err := Rollback(context.Background(), opts)
			if err != nil {
				t.Fatalf("Rollback() = %v, want the completed v1 -> v2 undone", err)
			}
			if cur := d.named(release.CurrentLink); cur != "v1" || res.Backup != archive {
				t.Errorf("after Rollback(): current %q from %q, want v1 from %s", cur, res.Backup, archive)
			}
		})
	}
}
