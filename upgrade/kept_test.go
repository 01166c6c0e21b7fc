package upgrade

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/release"
)

// TestRolledBackCopiesPruned: each rollback keeps the data it replaced as
// <data_dir>.rolled-back-<time>, and leaves at most KeepRolledBack of
// them, the newest, never fewer than one.
func TestRolledBackCopiesPruned(t *testing.T) {
	for _, keep := range []int{0, 1, 2} {
		f, opts := newFake(t)
		opts.KeepRolledBack = keep
		now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
		opts.Now = func() time.Time { now = now.Add(time.Minute); return now }
		var kept []string
		for range 4 {
			if _, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}}); err != nil {
				t.Fatal(err)
			}
			res, err := Rollback(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			kept = append(kept, res.KeptAside)
		}
		got, _ := filepath.Glob(f.dataDir + ".rolled-back-*")
		want := kept[len(kept)-max(keep, 1):]
		if !slices.Equal(got, want) {
			t.Errorf("keep %d: rolled-back copies %q, want the newest %q", keep, got, want)
		}
	}
}

// goneFake is a fake whose supervisor goes away when gone is closed.
type goneFake struct {
	*fake
	gone   chan struct{}
	during string // "backup" or "health": close gone then
}

func (g *goneFake) Gone() <-chan struct{} { return g.gone }
func (g *goneFake) Backup(ctx context.Context, r Release, spare string) (string, error) {
	if g.during == "backup" {
		close(g.gone)
		<-ctx.Done() // the backup is cancelled
		return "", context.Cause(ctx)
	}
	return g.fake.Backup(ctx, r, spare)
}
func (g *goneFake) WaitHealthy(ctx context.Context, r Release) error {
	if g.during == "health" {
		close(g.gone)
		<-ctx.Done() // not the whole HealthWait
		return ctx.Err()
	}
	return g.fake.WaitHealthy(ctx, r)
}

// TestSupervisorGone: a supervisor that goes away during the pre-upgrade
// backup stops the upgrade before activation (nothing activated, nothing
// rolled back); during the health wait the upgrade rolls back at once.
func TestSupervisorGone(t *testing.T) {
	for _, during := range []string{"backup", "health"} {
		f, opts := newFake(t)
		g := &goneFake{fake: f, gone: make(chan struct{}), during: during}
		opts.Services, opts.Data, opts.HealthWait = g, g, time.Hour
		start := time.Now()
		_, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}})
		if !errors.Is(err, ErrSupervisorGone) || !strings.Contains(err.Error(), "start hbx supervise") || time.Since(start) > 10*time.Second {
			t.Fatalf("%s: Upgrade() = %v after %s, want ErrSupervisorGone at once", during, err, time.Since(start))
		}
		j, _ := ReadJournal(opts.RuntimeDir)
		switch during {
		case "backup":
			if slices.ContainsFunc(f.calls, func(c string) bool { return strings.HasPrefix(c, "activate") || strings.HasPrefix(c, "pin") }) {
				t.Errorf("backup: the upgrade went on: %q", f.calls)
			}
			if !strings.Contains(err.Error(), "stopped before activation") || j.Phase != PhaseAborted {
				t.Errorf("backup: error %v, journal %s; want stopped before activation, aborted", err, j.Phase)
			}
		case "health":
			if !errors.Is(err, ErrRolledBack) || j.Phase != PhaseRolledBack || !f.cur.Equal(oldRel.Target) {
				t.Errorf("health: error %v, journal %s, active %s; want rolled back to the old release", err, j.Phase, f.cur)
			}
		}
	}
}

// TestRollbackKeepsItsCopyWhenTheClockWentBack: the rolled-back copy a
// rollback made is never the one its prune removes, even when an older
// copy has a newer name (the clock was set back since).
func TestRollbackKeepsItsCopyWhenTheClockWentBack(t *testing.T) {
	f, opts := newFake(t)
	opts.KeepRolledBack = 1
	future := datadir.RolledBack.Path(f.dataDir, "20301231T000000Z")
	if err := os.MkdirAll(future, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}}); err != nil {
		t.Fatal(err)
	}
	res, err := Rollback(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := filepath.Glob(f.dataDir + ".rolled-back-*")
	if want := []string{res.KeptAside}; !slices.Equal(got, want) {
		t.Errorf("rolled-back copies after the rollback %q, want its own %q (keep 1)", got, want)
	}
}

// TestRecoveredRollbackKeepsTheKilledAttemptsCopy: a rollback killed after
// its restore committed left the newer data as a rolled-back copy; the
// recovery does the rollback again, whose restore keeps the data then in
// place as a newer copy. With KeepRolledBack 1 its prune keeps both (the
// first holds data no archive has) and removes only copies from before
// the rollback began, also when a recovery failed in between.
func TestRecoveredRollbackKeepsTheKilledAttemptsCopy(t *testing.T) {
	for _, failedOnce := range []bool{false, true} {
		f, opts := newFake(t)
		opts.KeepRolledBack, opts.Services = 1, nil
		f.cur, f.prev = newRel, oldRel
		began := time.Date(2026, 11, 29, 9, 59, 0, 0, time.UTC)
		older := datadir.RolledBack.Path(f.dataDir, "20261128T100000Z") // an earlier rollback's
		killed := datadir.RolledBack.Path(f.dataDir, datadir.Stamp(began.Add(30*time.Second)))
		for _, d := range []string{older, killed} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(killed, "generation"), []byte("written by v2"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(opts.RuntimeDir, 0o755); err != nil {
			t.Fatal(err)
		}
		j := &Journal{Old: oldRel, New: newRel, Backup: "/b/pre-upgrade.tar.gz.gpg", Error: rollbackBy}
		if err := j.write(opts.RuntimeDir, PhaseRollingBack, began); err != nil {
			t.Fatal(err)
		}
		if failedOnce {
			f.failRestore = errors.New("boom")
			if _, err := Recover(context.Background(), opts); err == nil {
				t.Fatal("Recover() with a failing restore = nil error")
			}
			f.failRestore = nil
		}
		msg, err := Recover(context.Background(), opts)
		if err != nil {
			t.Fatalf("Recover() = %v", err)
		}
		got, _ := filepath.Glob(f.dataDir + ".rolled-back-*")
		jr, _ := ReadJournal(opts.RuntimeDir)
		if want := []string{killed, jr.KeptAside}; !slices.Equal(got, want) {
			t.Errorf("failed once %v: rolled-back copies after the recovery %q, want the killed attempt's and the recovery's %q (%s)", failedOnce, got, want, msg)
		}
		if b, err := os.ReadFile(filepath.Join(killed, "generation")); err != nil || string(b) != "written by v2" {
			t.Errorf("failed once %v: the killed attempt's copy holds %q, %v", failedOnce, b, err)
		}
		if !jr.RollingBackSince.IsZero() || jr.Phase != PhaseRolledBack {
			t.Errorf("failed once %v: journal after the recovery: phase %s, rolling back since %v; want rolled-back, zero", failedOnce, jr.Phase, jr.RollingBackSince)
		}
	}
}

// TestRollbackNamesExtraPathCopies: where the rollback's restore kept
// what it replaced in extra backup.paths directories is said, one note
// each, and those copies are not pruned with the data directory's.
func TestRollbackNamesExtraPathCopies(t *testing.T) {
	f, opts := newFake(t)
	opts.KeepRolledBack = 1
	hermes := filepath.Join(filepath.Dir(f.dataDir), "hermes-home")
	copyOf := datadir.RolledBack.Path(hermes, "20261129T100000Z")
	if err := os.MkdirAll(copyOf, 0o700); err != nil {
		t.Fatal(err)
	}
	f.extraKept = map[string]string{hermes: copyOf}
	if _, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}}); err != nil {
		t.Fatal(err)
	}
	res, err := Rollback(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	want := "kept what the rollback replaced in " + hermes + " as " + copyOf + " (never pruned: remove it once not needed)"
	if !slices.Contains(res.Notes, want) {
		t.Errorf("Rollback() notes = %q, want %q", res.Notes, want)
	}
	if _, err := os.Stat(copyOf); err != nil {
		t.Errorf("the extra path's copy after the rollback: %v", err)
	}
}
