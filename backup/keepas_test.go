package backup

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/internal/datadir"
)

// takeOld is Services whose Hold, between the staging and the swap, puts
// a non-empty directory at every name the restore's journal keeps a
// replaced tree at: the move aside in the swap then finds its name taken.
type takeOld struct {
	t    *testing.T
	data string
}

func (s takeOld) Hold(context.Context) (Hold, error) {
	j, err := readJournal(s.data)
	if err != nil || j == nil {
		s.t.Fatalf("journal at the hold: %+v, %v", j, err)
	}
	for _, r := range j.Roots {
		write(s.t, r.Old, "./ 0700", "someone-elses 0600 not ours")
	}
	return nil, nil
}
func (takeOld) WaitHealthy(context.Context) error           { return nil }
func (takeOld) WaitRunning(context.Context, []string) error { return nil }

// TestRestoreKeepAsRolledBack: a restore with KeepAs datadir.RolledBack
// (hbx rollback's) moves the data it replaces straight to a rolled-back
// copy, byte for byte, under a fresh name when the first is taken, and
// no later restore nor pre-restore prune removes that copy; when the
// move aside itself fails (its name taken at the swap) the restore is
// undone and the data stays as it was.
func TestRestoreKeepAsRolledBack(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 15, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		taken      bool // a non-empty rolled-back copy of the same second exists
		takeAtSwap bool
	}{
		{name: "free name"},
		{name: "name taken before the restore", taken: true},
		{name: "name taken at the swap", takeAtSwap: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t)
			write(t, b.data, "db 0600 pre-upgrade")
			archive := b.backup(nil).Path
			// What the newer release wrote: held by no archive.
			write(t, b.data, "db 0600 written by the newer release", "big 0600 bytes 100000 7", "dir/ 0750", "dir/f 0640 x")
			newer := snapshot(t, b.data)
			taken := datadir.RolledBack.Path(b.data, datadir.Stamp(now))
			if tc.taken {
				write(t, taken, "./ 0700", "someone-elses 0600 not ours")
			}
			o := b.restoreOptions(archive)
			o.KeepAs, o.KeepPreRestore, o.Now = datadir.RolledBack, 1, func() time.Time { return now }
			if tc.takeAtSwap {
				o.Services = takeOld{t: t, data: b.data}
			}
			rr, err := Restore(context.Background(), o)
			if tc.takeAtSwap {
				if err == nil {
					t.Fatalf("Restore() with the copy's name taken at the swap = %+v, want an error", rr)
				}
				t.Logf("Restore() = %v", err)
				if diff := cmp.Diff(snapshot(t, b.data), newer); diff != "" {
					t.Errorf("data after the failed restore (-got +want):\n%s\nerror: %v", diff, err)
				}
				return
			}
			must(t, err)
			kept := rr.Restored[b.data]
			if !datadir.RolledBack.Of(filepath.Base(b.data), filepath.Base(kept)) || tc.taken && kept == taken {
				t.Fatalf("Restored[data] = %q, want a fresh rolled-back copy (not %s)", kept, taken)
			}
			if diff := cmp.Diff(withoutRoot(snapshot(t, kept)), withoutRoot(newer)); diff != "" {
				t.Errorf("rolled-back copy (-got +want):\n%s", diff)
			}
			// Later plain restores, then a prune of every pre-restore copy.
			for i, keep := range []int{1, 0, 1} {
				p := b.restoreOptions(archive)
				p.KeepPreRestore, p.Now = keep, func() time.Time { return now.Add(time.Duration(i+1) * time.Second) }
				_, err := Restore(context.Background(), p)
				must(t, err)
			}
			if _, err := datadir.Prune(b.data, datadir.PreRestore, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(kept); err != nil {
				t.Fatalf("rolled-back copy after later restores and a prune: %v", err)
			}
			if diff := cmp.Diff(withoutRoot(snapshot(t, kept)), withoutRoot(newer)); diff != "" {
				t.Errorf("rolled-back copy after later restores and a prune (-got +want):\n%s", diff)
			}
			if tc.taken {
				if got, err := os.ReadFile(filepath.Join(taken, "someone-elses")); err != nil || string(got) != "not ours" {
					t.Errorf("the copy that held the name: %q, %v", got, err)
				}
			}
		})
	}
}

// TestRestoreKeepsItsOwnCopyWhenTheClockWentBack: a restore's own
// pre-restore copy is never pruned by that restore while
// keep_pre_restore keeps any, even when the clock was set back since an
// older copy was made (the older one then has the newest name).
func TestRestoreKeepsItsOwnCopyWhenTheClockWentBack(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "db 0600 archived")
	archive := b.backup(nil).Path
	write(t, b.data, "db 0600 written since")
	want := snapshot(t, b.data)
	future := datadir.PreRestore.Path(b.data, "20301231T000000Z")
	write(t, future, "./ 0700", "f 0600 older copy, newer name")
	o := b.restoreOptions(archive)
	o.KeepPreRestore, o.Now = 1, func() time.Time { return time.Date(2026, 12, 1, 10, 15, 0, 0, time.UTC) }
	rr, err := Restore(context.Background(), o)
	must(t, err)
	own := rr.Restored[b.data]
	if own == "" {
		t.Fatalf("Restored[data] = \"\", want this restore's copy")
	}
	if diff := cmp.Diff(withoutRoot(snapshot(t, own)), withoutRoot(want)); diff != "" {
		t.Errorf("this restore's copy %s (-got +want):\n%s", own, diff)
	}
	if _, err := os.Stat(future); !os.IsNotExist(err) {
		t.Errorf("the older copy %s: %v, want it pruned (keep_pre_restore 1)", future, err)
	}
}

// TestRestoreKeepAsCoversExtraPaths: with KeepAs, what a restore replaces
// in an extra backup.paths directory becomes the same kind of copy as the
// data directory's, so a rollback's replaced extra directory (written
// since the archive, held by no archive) is never a pre-restore copy that
// later restores prune.
func TestRestoreKeepAsCoversExtraPaths(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 15, 0, 0, time.UTC)
	b := newBox(t)
	hermes := filepath.Join(b.root, "workspace/hermes-home")
	write(t, b.data, "db 0600 pre-upgrade")
	write(t, hermes, "notes/ 0700", "notes/n 0600 pre-upgrade notes")
	archive := b.backup(func(o *Options) { o.Paths = []string{hermes} }).Path
	write(t, hermes, "notes/n 0600 written since", "new 0600 new")
	newer := snapshot(t, hermes)
	o := b.restoreOptions(archive)
	o.AllowedPaths, o.KeepAs, o.KeepPreRestore, o.Now = []string{hermes}, datadir.RolledBack, 1, func() time.Time { return now }
	rr, err := Restore(context.Background(), o)
	must(t, err)
	kept := rr.Restored[hermes]
	if !datadir.RolledBack.Of(filepath.Base(hermes), filepath.Base(kept)) {
		t.Fatalf("Restored[%s] = %q, want a rolled-back copy", hermes, kept)
	}
	for i, keep := range []int{1, 0} {
		p := b.restoreOptions(archive)
		p.AllowedPaths, p.KeepPreRestore, p.Now = []string{hermes}, keep, func() time.Time { return now.Add(time.Duration(i+1) * time.Second) }
		_, err := Restore(context.Background(), p)
		must(t, err)
	}
	if diff := cmp.Diff(withoutRoot(snapshot(t, kept)), withoutRoot(newer)); diff != "" {
		t.Errorf("the extra path's rolled-back copy after later restores (-got +want):\n%s", diff)
	}
}
