package upgrade

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
)

// diskRuntime is the fake with the runtime half on real files: release
// directories under releases/ and the current and previous links in
// the runtime directory, moved by package release as the installer
// moves them.
type diskRuntime struct {
	*fake
	rd string
}

// rel is release v<n> of the test image, its digests derived from n.
func rel(n string) Release {
	return Release{Target: release.Target{Image: "r/e:v" + n + "@" + string(digest.FromString("idx"+n)), Platform: "linux/amd64",
		IndexDigest: digest.FromString("idx" + n), ManifestDigest: digest.FromString("man" + n)}}
}

// publish writes releases/<manifest hex> of r.
func (d *diskRuntime) publish(t *testing.T, r Release) {
	t.Helper()
	dir := filepath.Join(d.rd, release.ReleasesDir, r.ManifestDigest.Encoded())
	if err := os.MkdirAll(filepath.Join(dir, release.RootfsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(release.Meta{Format: release.MetaFormat, Image: r.Image, IndexDigest: r.IndexDigest, ManifestDigest: r.ManifestDigest, Platform: r.Platform})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, release.MetaFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// link points the link name at r (nil: removes it).
func (d *diskRuntime) link(t *testing.T, name string, r *Release) {
	t.Helper()
	p := filepath.Join(d.rd, name)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if r != nil {
		if err := os.Symlink(filepath.Join(release.ReleasesDir, r.ManifestDigest.Encoded()), p); err != nil {
			t.Fatal(err)
		}
	}
}

// named is the version the link name points to ("" when none).
func (d *diskRuntime) named(name string) string {
	inst, err := release.Link(d.rd, name)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(strings.SplitN(inst.Meta.Image, "@", 2)[0], "r/e:")
}

func (d *diskRuntime) read(name string) (Release, error) {
	inst, err := release.Link(d.rd, name)
	if err != nil {
		return Release{}, err
	}
	return Release{Target: inst.Meta.Target()}, nil
}

func (d *diskRuntime) Active() (Release, error)   { return d.read(release.CurrentLink) }
func (d *diskRuntime) Previous() (Release, error) { return d.read(release.PreviousLink) }

// Stage returns d.staged when set, else v3, published beforehand.
func (d *diskRuntime) Stage(context.Context, string, digest.Digest) (Release, Transfer, error) {
	d.calls = append(d.calls, "stage")
	if d.staged.IndexDigest != "" {
		return d.staged, Transfer{}, nil
	}
	return rel("3"), Transfer{}, nil
}

func (d *diskRuntime) Activate(_ context.Context, m digest.Digest) error {
	return release.SwitchCurrent(d.rd, m.Encoded())
}

func (d *diskRuntime) SetPrevious(_ context.Context, m digest.Digest) (bool, error) {
	hex := ""
	if m != "" {
		hex = m.Encoded()
	}
	return release.SetPrevious(d.rd, hex)
}

// Restore reactivates r from previous as the composer's restore does
// (installer.Reactivate), then keeps the replaced data aside.
func (d *diskRuntime) Restore(ctx context.Context, _ string, r Release) (Kept, error) {
	d.step("restore")
	if cur, err := d.Active(); err != nil || !cur.Equal(r.Target) {
		if prev, err := d.Previous(); err == nil && prev.Equal(r.Target) {
			if err := d.Activate(ctx, r.ManifestDigest); err != nil {
				return Kept{}, err
			}
		}
	}
	aside, err := d.keepAside()
	return Kept{Data: aside}, err
}

// newDisk is a box with v1, v2 and v3 published, v2 current and v1
// previous, before an upgrade to v3; logs collects the log.
func newDisk(t *testing.T) (*diskRuntime, Options, *bytes.Buffer) {
	t.Helper()
	f, opts := newFake(t)
	d := &diskRuntime{fake: f, rd: opts.RuntimeDir}
	for _, n := range []string{"1", "2", "3"} {
		d.publish(t, rel(n))
	}
	v1, v2 := rel("1"), rel("2")
	d.link(t, release.CurrentLink, &v2)
	d.link(t, release.PreviousLink, &v1)
	var logs bytes.Buffer
	opts.Runtime, opts.Data = d, d
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	return d, opts, &logs
}

// TestSelfRollbackKeepsPrevious: an upgrade from v2 (previous v1) to a
// v3 that fails rolls back to v2 with previous on v1 again, not on the
// failed v3 (which the prune then removes), on real links; with no
// previous before, none after; with v1 gone meanwhile, none, said once.
func TestSelfRollbackKeepsPrevious(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(t *testing.T, d *diskRuntime)
		wantErr  error
		wantPrev string
		wantNote bool
	}{
		{name: "health fails", setup: func(t *testing.T, d *diskRuntime) { d.failHealth = errors.New("boom") }, wantErr: ErrRolledBack, wantPrev: "v1"},
		{name: "no previous before", setup: func(t *testing.T, d *diskRuntime) {
			d.failHealth = errors.New("boom")
			d.link(t, release.PreviousLink, nil)
		}, wantErr: ErrRolledBack, wantPrev: ""},
		{name: "previous removed meanwhile", setup: func(t *testing.T, d *diskRuntime) {
			d.failHealth = errors.New("boom")
			d.onWait = func() {
				if err := os.RemoveAll(filepath.Join(d.rd, release.ReleasesDir, rel("1").ManifestDigest.Encoded())); err != nil {
					t.Error(err)
				}
			}
		}, wantErr: ErrRolledBack, wantPrev: "", wantNote: true},
		{name: "healthy", wantPrev: "v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, opts, logs := newDisk(t)
			if tc.setup != nil {
				tc.setup(t, d)
			}
			v3 := rel("3")
			_, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: v3.Image, IndexDigest: v3.IndexDigest}})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Upgrade() = %v, want %v", err, tc.wantErr)
			}
			wantCur := "v3"
			if tc.wantErr != nil {
				wantCur = "v2"
			}
			if cur, prev := d.named(release.CurrentLink), d.named(release.PreviousLink); cur != wantCur || prev != tc.wantPrev {
				t.Errorf("after Upgrade(): current %q, previous %q; want %q, %q", cur, prev, wantCur, tc.wantPrev)
			}
			if n := strings.Count(logs.String(), "is no longer on disk"); n != b2i(tc.wantNote) {
				t.Errorf("the log says %d times that previous's release is gone, want %d:\n%s", n, b2i(tc.wantNote), logs)
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestRecoveryKeepsPrevious: an upgrade from v2 (previous v1) to v3
// killed at each point from activation on ends, once Recover (the next
// hbx upgrade or hbx supervise) rolls it back, with v2 current and v1
// previous, as the upgrade's own rollback does; a journal of an earlier
// hbx (no previous recorded) leaves previous where the restore put it.
func TestRecoveryKeepsPrevious(t *testing.T) {
	v1, v2, v3 := rel("1"), rel("2"), rel("3")
	for _, tc := range []struct {
		name       string
		phase      Phase
		cur, prev  *Release // the links the kill left
		unrecorded bool     // the journal records no previous
		wantPrev   string
	}{
		{name: "activating, before the switch", phase: PhaseActivating, cur: &v2, prev: &v1, wantPrev: "v1"},
		{name: "activating, previous moved, current not", phase: PhaseActivating, cur: &v2, prev: &v2, wantPrev: "v1"},
		{name: "activating, after the switch", phase: PhaseActivating, cur: &v3, prev: &v2, wantPrev: "v1"},
		{name: "rolling back, v2 reactivated", phase: PhaseRollingBack, cur: &v2, prev: &v3, wantPrev: "v1"},
		{name: "rolling back, previous pointed back", phase: PhaseRollingBack, cur: &v2, prev: &v1, wantPrev: "v1"},
		{name: "rolling back, previous link missing", phase: PhaseRollingBack, cur: &v2, prev: nil, wantPrev: "v1"},
		{name: "journal of an earlier hbx", phase: PhaseActivating, cur: &v3, prev: &v2, unrecorded: true, wantPrev: "v3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, opts, _ := newDisk(t)
			d.link(t, release.CurrentLink, tc.cur)
			d.link(t, release.PreviousLink, tc.prev)
			j := &Journal{Old: v2, New: v3, Backup: "/backups/pre-upgrade-x.tar.gz.gpg", Previous: &PreviousRecord{Release: &v1}}
			if tc.unrecorded {
				j.Previous = nil
			}
			if err := j.write(opts.RuntimeDir, tc.phase, opts.Now()); err != nil {
				t.Fatal(err)
			}
			if _, err := Recover(context.Background(), opts); err != nil {
				t.Fatalf("Recover() = %v", err)
			}
			if cur, prev := d.named(release.CurrentLink), d.named(release.PreviousLink); cur != "v2" || prev != tc.wantPrev {
				t.Errorf("after Recover(): current %q, previous %q; want v2, %q", cur, prev, tc.wantPrev)
			}
			if j, err := ReadJournal(opts.RuntimeDir); err != nil || j.Phase != PhaseRolledBack {
				t.Errorf("journal after Recover() = %+v, %v; want phase rolled-back", j, err)
			}
		})
	}
}

// TestRollbackLeavesPreviousOnTheNewRelease: hbx rollback of a completed
// upgrade v2 -> v3 leaves previous on v3, the release rolled back from,
// not on the v1 the journal recorded.
func TestRollbackLeavesPreviousOnTheNewRelease(t *testing.T) {
	d, opts, _ := newDisk(t)
	v3 := rel("3")
	if _, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: v3.Image, IndexDigest: v3.IndexDigest}}); err != nil {
		t.Fatalf("Upgrade() = %v", err)
	}
	d.recorded = rel("2")
	if _, err := Rollback(context.Background(), opts); err != nil {
		t.Fatalf("Rollback() = %v", err)
	}
	if cur, prev := d.named(release.CurrentLink), d.named(release.PreviousLink); cur != "v2" || prev != "v3" {
		t.Errorf("after Rollback(): current %q, previous %q; want v2, v3", cur, prev)
	}
}
