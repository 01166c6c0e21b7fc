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
