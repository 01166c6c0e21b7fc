package upgrade

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/release"
)

var (
	oldRel = Release{Target: release.Target{Image: "r/e:v1@" + string(digest.FromString("i1")), Platform: "linux/amd64", IndexDigest: digest.FromString("i1"), ManifestDigest: digest.FromString("m1")}}
	newRel = Release{Target: release.Target{Image: "r/e:v2@" + string(digest.FromString("i2")), Platform: "linux/amd64", IndexDigest: digest.FromString("i2"), ManifestDigest: digest.FromString("m2")}}
)

// fake is every interface of Options, recording calls in order.
type fake struct {
	dataDir      string
	restores     int               // Restore's count, which names its rolled-back copies
	extraKept    map[string]string // Restore's Kept.Extra
	calls        []string
	cur, prev    Release
	failStage    error
	failBackup   error
	failActivate error
	failHealth   error
	failCheck    error
	recorded     Release // the digests the archive records; zero: previous's
	failRestore  error
	staged       Release // what Stage returns; zero: newRel
	transfer     Transfer
	// onWait, when set, runs once inside WaitHealthy (e.g. an interrupt
	// arriving during the health wait).
	onWait func()
	// ctxErrs records ctx.Err() as WaitHealthy and Restore saw it.
	ctxErrs []error
	// spared is what each Backup was told to spare.
	spared []string
	// at, when set, is told each step as it begins: "backup", "wait",
	// "restore".
	at func(step string)
}

// step tells f.at that step begins.
func (f *fake) step(name string) {
	if f.at != nil {
		f.at(name)
	}
}

func (f *fake) Active() (Release, error)   { return f.cur, nil }
func (f *fake) Previous() (Release, error) { return f.prev, nil }
func (f *fake) Stage(_ context.Context, image string, _ digest.Digest) (Release, Transfer, error) {
	f.calls = append(f.calls, "stage")
	if f.staged.IndexDigest != "" {
		return f.staged, f.transfer, f.failStage
	}
	return newRel, f.transfer, f.failStage
}
func (f *fake) Activate(_ context.Context, m digest.Digest) error {
	f.calls = append(f.calls, "activate "+m.Encoded()[:4])
	if f.failActivate != nil {
		return f.failActivate
	}
	if m == f.prev.ManifestDigest {
		f.cur, f.prev = f.prev, f.cur
	} else {
		f.prev, f.cur = f.cur, newRel
		if f.staged.IndexDigest != "" {
			f.cur = f.staged
		}
	}
	return nil
}
func (f *fake) SetPrevious(_ context.Context, m digest.Digest) (bool, error) {
	if m == "" {
		f.calls = append(f.calls, "previous none")
		f.prev = Release{}
		return true, nil
	}
	f.calls = append(f.calls, "previous "+m.Encoded()[:4])
	for _, r := range []Release{oldRel, newRel, f.staged} {
		if r.ManifestDigest == m {
			f.prev = r
		}
	}
	return true, nil
}
func (f *fake) Hold(context.Context) (Hold, error) { f.calls = append(f.calls, "hold"); return f, nil }
func (f *fake) Release() error                     { f.calls = append(f.calls, "release"); return nil }
func (f *fake) WaitHealthy(ctx context.Context, _ Release) error {
	f.calls = append(f.calls, "wait")
	f.step("wait")
	if f.onWait != nil {
		f.onWait()
		f.onWait = nil
	}
	f.ctxErrs = append(f.ctxErrs, ctx.Err())
	return f.failHealth
}
func (f *fake) Backup(_ context.Context, _ Release, spare string) (string, error) {
	f.calls = append(f.calls, "backup")
	f.spared = append(f.spared, spare)
	f.step("backup")
	return "/backups/pre-upgrade-x.tar.gz.gpg", f.failBackup
}
func (f *fake) Recorded(string) (digest.Digest, digest.Digest, error) {
	if f.recorded.IndexDigest != "" {
		return f.recorded.IndexDigest, f.recorded.ManifestDigest, f.failCheck
	}
	return f.prev.IndexDigest, f.prev.ManifestDigest, f.failCheck
}
func (f *fake) Restore(ctx context.Context, archive string, r Release) (Kept, error) {
	f.calls = append(f.calls, "restore "+r.ManifestDigest.Encoded()[:4])
	f.step("restore")
	f.ctxErrs = append(f.ctxErrs, ctx.Err())
	if f.failRestore != nil {
		return Kept{}, f.failRestore
	}
	// As the composer's restore does: previous holds r, so it is
	// reactivated in place.
	if f.prev.ManifestDigest == r.ManifestDigest {
		if err := f.Activate(ctx, r.ManifestDigest); err != nil {
			return Kept{}, err
		}
	}
	aside, err := f.keepAside()
	return Kept{Data: aside, Extra: f.extraKept}, err
}

// keepAside makes the rolled-back copy a restore's swap makes (the
// composer passes backup.RestoreOptions.KeepAs), named a second after
// the one before (the first at newFake's Now), and returns it.
func (f *fake) keepAside() (string, error) {
	f.restores++
	aside := datadir.RolledBack.Path(f.dataDir, datadir.Stamp(time.Date(2026, 11, 29, 10, 0, f.restores-1, 0, time.UTC)))
	return aside, os.MkdirAll(aside, 0o700)
}
func (f *fake) Pin(r Release) (string, error) {
	f.calls = append(f.calls, "pin "+r.ManifestDigest.Encoded()[:4])
	return "", nil
}

func newFake(t *testing.T) (*fake, Options) {
	t.Helper()
	dir := t.TempDir()
	f := &fake{dataDir: filepath.Join(dir, "data"), cur: oldRel, prev: Release{}}
	return f, Options{
		RuntimeDir: filepath.Join(dir, "runtime"), DataDir: f.dataDir, HealthWait: time.Second,
		Runtime: f, Services: f, Data: f, Config: f,
		Now: func() time.Time { return time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC) },
	}
}

var (
	m1 = oldRel.ManifestDigest.Encoded()[:4]
	m2 = newRel.ManifestDigest.Encoded()[:4]
)

func TestUpgrade(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		setup     func(*fake, *Options)
		target    Target
		wantErr   error
		wantCalls []string
		wantPhase Phase // "" : no journal
		wantCur   Release
	}{
		{
			name:      "healthy",
			target:    Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}},
			wantCalls: []string{"stage", "hold", "backup", "pin " + m2, "activate " + m2, "release", "wait"},
			wantPhase: PhaseDone, wantCur: newRel,
		},
		{
			name:      "unhealthy rolls back",
			setup:     func(f *fake, _ *Options) { f.failHealth = boom },
			target:    Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}},
			wantErr:   ErrRolledBack,
			wantCalls: []string{"stage", "hold", "backup", "pin " + m2, "activate " + m2, "release", "wait", "pin " + m1, "restore " + m1, "activate " + m1, "previous none"},
			wantPhase: PhaseRolledBack, wantCur: oldRel,
		},
		{
			name:      "activation fails rolls back",
			setup:     func(f *fake, _ *Options) { f.failActivate = boom },
			target:    Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}},
			wantErr:   ErrRolledBack,
			wantCalls: []string{"stage", "hold", "backup", "pin " + m2, "activate " + m2, "release", "pin " + m1, "restore " + m1, "previous none"},
			wantPhase: PhaseRolledBack, wantCur: oldRel,
		},
		{
			name:      "backup fails aborts",
			setup:     func(f *fake, _ *Options) { f.failBackup = boom },
			target:    Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}},
			wantErr:   boom,
			wantCalls: []string{"stage", "hold", "backup", "release", "wait"},
			wantPhase: PhaseAborted, wantCur: oldRel,
		},
		{
			name: "rehearsal refuses before anything stops",
			setup: func(f *fake, o *Options) {
				o.Rehearse = func(context.Context, Release) (string, error) {
					f.calls = append(f.calls, "rehearse")
					return "", boom
				}
			},
			target:    Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}},
			wantErr:   boom,
			wantCalls: []string{"stage", "rehearse"},
			wantCur:   oldRel,
		},
		{
			name: "rehearsal passes, then the upgrade",
			setup: func(f *fake, o *Options) {
				o.Rehearse = func(_ context.Context, r Release) (string, error) {
					f.calls = append(f.calls, "rehearse "+r.ManifestDigest.Encoded()[:4])
					return "rehearsed", nil
				}
			},
			target:    Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}},
			wantCalls: []string{"stage", "rehearse " + m2, "hold", "backup", "pin " + m2, "activate " + m2, "release", "wait"},
			wantPhase: PhaseDone, wantCur: newRel,
		},
		{
			name:      "staging fails changes nothing",
			setup:     func(f *fake, _ *Options) { f.failStage = boom },
			target:    Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}},
			wantErr:   boom,
			wantCalls: []string{"stage"},
			wantCur:   oldRel,
		},
		{
			name:    "same release",
			target:  Target{Target: release.Target{Image: oldRel.Image, IndexDigest: oldRel.IndexDigest}},
			wantErr: ErrSameRelease, wantCur: oldRel,
		},
		{
			name:    "no supervisor",
			setup:   func(_ *fake, o *Options) { o.Services = nil },
			target:  Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}},
			wantErr: ErrNoSupervisor, wantCur: oldRel,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, opts := newFake(t)
			if tc.setup != nil {
				tc.setup(f, &opts)
			}
			_, err := Upgrade(context.Background(), opts, tc.target)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Upgrade() = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(f.calls, tc.wantCalls); diff != "" {
				t.Errorf("calls (-got +want):\n%s", diff)
			}
			j, err := ReadJournal(opts.RuntimeDir)
			if err != nil {
				t.Fatal(err)
			}
			var phase Phase
			if j != nil {
				phase = j.Phase
			}
			if phase != tc.wantPhase {
				t.Errorf("journal phase = %q, want %q", phase, tc.wantPhase)
			}
			if !f.cur.Equal(tc.wantCur.Target) {
				t.Errorf("active = %s, want %s", f.cur, tc.wantCur)
			}
			if tc.wantPhase == PhaseRolledBack {
				if _, err := os.Stat(opts.DataDir + ".rolled-back-20261129T100000Z"); err != nil {
					t.Errorf("replaced data not kept aside: %v", err)
				}
			}
		})
	}
}

// TestUpgradeNotesRehearsal: an upgrade with a rehearsal carries its
// note; one without (hbx upgrade --no-rehearsal) says it was not
// rehearsed.
func TestUpgradeNotesRehearsal(t *testing.T) {
	target := Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}}
	for _, tc := range []struct {
		name     string
		rehearse func(context.Context, Release) (string, error)
		want     string
		not      string
	}{
		{"rehearsed", func(context.Context, Release) (string, error) { return "rehearsed in 1s", nil }, "rehearsed in 1s", NotRehearsed},
		{"--no-rehearsal", nil, NotRehearsed, "rehearsed in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, opts := newFake(t)
			opts.Rehearse = tc.rehearse
			res, err := Upgrade(context.Background(), opts, target)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(res.Notes, tc.want) || slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, tc.not) }) {
				t.Errorf("Upgrade() notes = %q, want %q and nothing with %q", res.Notes, tc.want, tc.not)
			}
		})
	}
}

// TestAbortKeepsPriorUpgrade: an upgrade that stops before activation
// leaves the completed one before it to roll back.
func TestAbortKeepsPriorUpgrade(t *testing.T) {
	f, opts := newFake(t)
	ctx := context.Background()
	if _, err := Upgrade(ctx, opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}}); err != nil {
		t.Fatal(err)
	}
	f.failBackup = errors.New("disk full")
	f.staged = Release{Target: release.Target{Image: "r/e:v3@" + string(digest.FromString("i3")), Platform: "linux/amd64", IndexDigest: digest.FromString("i3"), ManifestDigest: digest.FromString("m3")}}
	f.calls = nil
	if _, err := Upgrade(ctx, opts, Target{Target: release.Target{Image: f.staged.Image, IndexDigest: f.staged.IndexDigest}}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Upgrade() with a failing backup = %v, want the backup's error", err)
	}
	if diff := cmp.Diff(f.calls, []string{"stage", "hold", "backup", "release", "wait"}); diff != "" {
		t.Errorf("calls (-got +want):\n%s", diff)
	}
	j, _ := ReadJournal(opts.RuntimeDir)
	if j == nil || j.Phase != PhaseDone || !j.New.Equal(newRel.Target) {
		t.Fatalf("journal after the aborted upgrade = %+v, want the completed one back", j)
	}
	f.failBackup = nil
	if _, err := Rollback(ctx, opts); err != nil {
		t.Errorf("Rollback() after an aborted upgrade = %v", err)
	}
}

func TestRollback(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(*fake, *Options)
		wantErr error
		wantMsg string // in the error
	}{
		{name: "after a good upgrade"},
		{name: "no upgrade", setup: func(_ *fake, o *Options) { os.Remove(journalPath(o.RuntimeDir)) }, wantErr: ErrNoUpgrade},
		{name: "previous is another release", setup: func(f *fake, _ *Options) {
			f.prev = Release{Target: release.Target{Image: "x", IndexDigest: digest.FromString("x"), ManifestDigest: digest.FromString("y")}}
		}, wantErr: ErrMismatch},
		{name: "archive missing", setup: func(f *fake, _ *Options) { f.failCheck = errors.New("no such file") }, wantErr: ErrMismatch},
		{name: "archive does not match", setup: func(f *fake, _ *Options) { f.recorded = newRel }, wantErr: ErrMismatch, wantMsg: "the archive records index " + string(newRel.IndexDigest)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, opts := newFake(t)
			if _, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}}); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(f, &opts)
			}
			f.calls = nil
			var logs bytes.Buffer
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			res, err := Rollback(context.Background(), opts)
			if !errors.Is(err, tc.wantErr) || err != nil && !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Rollback() = %v, want %v saying %q", err, tc.wantErr, tc.wantMsg)
			}
			if err != nil {
				if len(f.calls) != 0 {
					t.Errorf("a refused rollback made calls %q", f.calls)
				}
				return
			}
			if !f.cur.Equal(oldRel.Target) || !strings.Contains(res.KeptAside, ".rolled-back-") {
				t.Errorf("after Rollback: active %s, kept aside %q", f.cur, res.KeptAside)
			}
			// The log says where the replaced data went.
			if !strings.Contains(logs.String(), "replaced data kept as a rolled-back copy") || !strings.Contains(logs.String(), "path="+res.KeptAside) {
				t.Errorf("Rollback log %q does not name the rolled-back copy %s", logs.String(), res.KeptAside)
			}
			if _, err := Rollback(context.Background(), opts); !errors.Is(err, ErrNoUpgrade) {
				t.Errorf("second Rollback() = %v, want ErrNoUpgrade", err)
			}
		})
	}
}

// TestRecover: what each journal phase left is finished or undone.
func TestRecover(t *testing.T) {
	for _, tc := range []struct {
		phase     Phase
		wantCalls []string
		wantPhase Phase
	}{
		{PhaseStaged, nil, PhaseAborted},
		{PhaseBackedUp, nil, PhaseAborted},
		{PhaseActivating, []string{"pin " + m1, "restore " + m1, "activate " + m1}, PhaseRolledBack},
		{PhaseRollingBack, []string{"pin " + m1, "restore " + m1, "activate " + m1}, PhaseRolledBack},
		{PhaseDone, nil, PhaseDone},
		{PhaseRolledBack, nil, PhaseRolledBack},
	} {
		t.Run(string(tc.phase), func(t *testing.T) {
			f, opts := newFake(t)
			f.cur, f.prev = newRel, oldRel
			os.MkdirAll(opts.RuntimeDir, 0o755)
			j := &Journal{Old: oldRel, New: newRel, Backup: "/b/pre-upgrade.tar.gz.gpg"}
			if err := j.write(opts.RuntimeDir, tc.phase, time.Now()); err != nil {
				t.Fatal(err)
			}
			opts.Services = nil
			if _, err := Recover(context.Background(), opts); err != nil {
				t.Fatalf("Recover() = %v", err)
			}
			if diff := cmp.Diff(f.calls, tc.wantCalls); diff != "" {
				t.Errorf("calls (-got +want):\n%s", diff)
			}
			got, _ := ReadJournal(opts.RuntimeDir)
			if got.Phase != tc.wantPhase {
				t.Errorf("phase after Recover = %q, want %q", got.Phase, tc.wantPhase)
			}
		})
	}
}

// TestSwitch: a release change without a supervisor stages, backs up,
// pins and activates, recorded by "hbx install", with no hold and no
// health wait; with a supervisor it holds the programs across the change;
// Rollback undoes it.
func TestSwitch(t *testing.T) {
	for _, withServices := range []bool{false, true} {
		f, opts := newFake(t)
		want := []string{"stage", "backup", "pin " + m2, "activate " + m2}
		if withServices {
			want = []string{"stage", "hold", "backup", "pin " + m2, "activate " + m2, "release"}
		} else {
			opts.Services = nil
		}
		res, err := Switch(context.Background(), opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}})
		if err != nil {
			t.Fatalf("Switch() = %v", err)
		}
		if diff := cmp.Diff(f.calls, want); diff != "" {
			t.Errorf("services %v: calls (-got +want):\n%s", withServices, diff)
		}
		j, err := ReadJournal(opts.RuntimeDir)
		if err != nil || j.Phase != PhaseDone || j.By != ByInstall || res.Backup == "" {
			t.Fatalf("journal %+v, %v; backup %q: want done by %q with a backup", j, err, res.Backup, ByInstall)
		}
		f.calls = nil
		if _, err := Rollback(context.Background(), opts); err != nil {
			t.Fatalf("Rollback() after Switch = %v", err)
		}
		if !f.cur.Equal(oldRel.Target) {
			t.Errorf("after Rollback: active %s, want %s", f.cur, oldRel)
		}
	}
}

// TestSwitchRehearses: a Switch with Options.Rehearse (hbx install
// without --no-rehearsal) boots the staged release first: a refusal
// stops it before anything is held, backed up, pinned, activated or
// journaled; a pass carries its note and the change goes on. Without
// Rehearse (hbx install --no-rehearsal, the supervisor's install on
// start) nothing is rehearsed and nothing noted.
func TestSwitchRehearses(t *testing.T) {
	boom := errors.New("it exited with status 1 before it was ready")
	for _, tc := range []struct {
		name      string
		rehearse  error // nil: passes
		noRehears bool
		wantCalls []string
		wantNote  string
	}{
		{name: "refused", rehearse: boom, wantCalls: []string{"stage", "rehearse"}},
		{name: "passes", wantCalls: []string{"stage", "rehearse", "hold", "backup", "pin " + m2, "activate " + m2, "release"}, wantNote: "rehearsed"},
		{name: "not rehearsed", noRehears: true, wantCalls: []string{"stage", "hold", "backup", "pin " + m2, "activate " + m2, "release"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, opts := newFake(t)
			if !tc.noRehears {
				opts.Rehearse = func(context.Context, Release) (string, error) {
					f.calls = append(f.calls, "rehearse")
					return "rehearsed", tc.rehearse
				}
			}
			res, err := Switch(context.Background(), opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}})
			if !errors.Is(err, tc.rehearse) {
				t.Fatalf("Switch() = %v, want %v", err, tc.rehearse)
			}
			if diff := cmp.Diff(f.calls, tc.wantCalls); diff != "" {
				t.Errorf("calls (-got +want):\n%s", diff)
			}
			if tc.rehearse != nil {
				if j, _ := ReadJournal(opts.RuntimeDir); j != nil || !f.cur.Equal(oldRel.Target) || !strings.Contains(err.Error(), "nothing was stopped, "+oldRel.Image+" stays active") {
					t.Errorf("after the refusal: journal %+v, active %s, error %q; want no journal, %s active, said", j, f.cur, err, oldRel)
				}
				return
			}
			var notes []string
			if tc.wantNote != "" {
				notes = []string{tc.wantNote}
			}
			if got := slices.DeleteFunc(slices.Clone(res.Notes), func(n string) bool { return n != "rehearsed" && n != NotRehearsed }); !slices.Equal(got, notes) {
				t.Errorf("Switch() notes = %q, want %q among them and no %q", res.Notes, notes, NotRehearsed)
			}
		})
	}
}

// TestRollbackSaysWhatIsRecorded: when the active release is not the one
// the journal recorded (changed without the upgrade path), Rollback says
// so and names what the journal does record, instead of blaming the
// recorded upgrade.
func TestRollbackSaysWhatIsRecorded(t *testing.T) {
	other := Release{Target: release.Target{Image: "r/e:v3@" + string(digest.FromString("i3")), Platform: "linux/amd64", IndexDigest: digest.FromString("i3"), ManifestDigest: digest.FromString("m3")}}
	for _, tc := range []struct {
		name      string
		rollback  bool // roll the recorded upgrade back first
		cur       Release
		want      []string
		wantNotIn string
	}{
		{name: "rolled back, then changed outside", rollback: true, cur: other,
			want:      []string{"the active release " + other.Image + " was installed without a record", "from " + oldRel.Image + " to " + newRel.Image + " was rolled back at "},
			wantNotIn: "already rolled back"},
		{name: "done, then changed outside", cur: other,
			want: []string{"the active release " + other.Image + " was installed without a record", "(hbx upgrade) from " + oldRel.Image + " to " + newRel.Image + " completed at "}},
		{name: "rolled back, then the new release installed outside", rollback: true, cur: newRel,
			want: []string{"the active release " + newRel.Image + " was installed without a record; the last recorded release change (hbx upgrade) from " + oldRel.Image + " to " + newRel.Image + " was rolled back at "}},
		{name: "rolled back", rollback: true, cur: oldRel,
			want: []string{"no upgrade to roll back: the last recorded release change (hbx upgrade) from " + oldRel.Image + " (the active release) to " + newRel.Image + " was rolled back at "}, wantNotIn: "the active release is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, opts := newFake(t)
			if _, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}}); err != nil {
				t.Fatal(err)
			}
			if tc.rollback {
				if _, err := Rollback(context.Background(), opts); err != nil {
					t.Fatal(err)
				}
			}
			f.cur, f.calls = tc.cur, nil
			_, err := Rollback(context.Background(), opts)
			if !errors.Is(err, ErrNoUpgrade) {
				t.Fatalf("Rollback() = %v, want ErrNoUpgrade", err)
			}
			t.Logf("Rollback() = %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Rollback() = %q, want it to say %q", err, w)
				}
			}
			if tc.wantNotIn != "" && strings.Contains(err.Error(), tc.wantNotIn) {
				t.Errorf("Rollback() = %q, must not say %q", err, tc.wantNotIn)
			}
			if len(f.calls) != 0 {
				t.Errorf("a refused rollback made calls %q", f.calls)
			}
		})
	}
}

// TestInterruptedChangeIsUndone: an interrupt (a cancelled context) during
// a change still lets the undo steps run to the end, and a Switch without
// a supervisor whose pre-change backup fails returns one error (it
// panicked on the nil Services while "starting the services again").
func TestInterruptedChangeIsUndone(t *testing.T) {
	t.Run("switch without supervisor, backup fails", func(t *testing.T) {
		f, opts := newFake(t)
		opts.Services = nil
		f.failBackup = context.Canceled
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Switch(ctx, opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}})
		if err == nil || !strings.Contains(err.Error(), "no supervisor runs") {
			t.Fatalf("Switch() = %v, want the backup's failure saying no supervisor runs", err)
		}
		if !f.cur.Equal(oldRel.Target) {
			t.Errorf("active %s after a failed Switch, want %s", f.cur, oldRel)
		}
		if j, err := ReadJournal(opts.RuntimeDir); err != nil || j == nil || j.Phase != PhaseAborted {
			t.Errorf("journal %+v, %v; want aborted", j, err)
		}
	})
	// From activation on, an interrupt cuts nothing short: the health
	// wait decides, and a rollback runs to its end.
	for _, sick := range []bool{false, true} {
		t.Run(fmt.Sprintf("upgrade interrupted in its health wait, sick=%v", sick), func(t *testing.T) {
			f, opts := newFake(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f.onWait = cancel
			want := newRel
			if sick {
				f.failHealth = errors.New("executor is FATAL")
				want = oldRel
			}
			_, err := Upgrade(ctx, opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}})
			if sick != errors.Is(err, ErrRolledBack) || !sick && err != nil {
				t.Fatalf("Upgrade() = %v, want rolled back: %v", err, sick)
			}
			if !f.cur.Equal(want.Target) {
				t.Errorf("active %s after an interrupted upgrade, want %s", f.cur, want)
			}
			for i, e := range f.ctxErrs {
				if e != nil {
					t.Errorf("step %d after the interrupt ran on a cancelled context: %v (calls %v)", i, e, f.calls)
				}
			}
			if len(f.ctxErrs) == 0 {
				t.Errorf("no step after the interrupt ran: calls %v", f.calls)
			}
		})
	}
}

// TestRollbackRecoversInterrupted: hbx rollback run on a change that was
// interrupted (journal activating, or staged before activation) recovers
// it, and that recovery is the rollback asked for: a result saying what
// it did, no error (issue 12: it rolled back, then said "no upgrade to
// roll back" and exited 1).
func TestRollbackRecoversInterrupted(t *testing.T) {
	for _, tc := range []struct {
		phase    Phase
		cur      Release
		wantSays string
	}{
		{PhaseActivating, newRel, "rolled back the interrupted upgrade"},
		{PhaseRollingBack, newRel, "rolled back the interrupted upgrade"},
		{PhaseStaged, oldRel, "interrupted before activation"},
	} {
		t.Run(string(tc.phase), func(t *testing.T) {
			f, opts := newFake(t)
			f.cur, f.prev = tc.cur, oldRel
			if tc.cur.Equal(oldRel.Target) {
				f.prev = Release{}
			}
			os.MkdirAll(opts.RuntimeDir, 0o755)
			j := &Journal{Old: oldRel, New: newRel, Backup: "/b/pre-upgrade.tar.gz.gpg"}
			if err := j.write(opts.RuntimeDir, tc.phase, time.Now()); err != nil {
				t.Fatal(err)
			}
			res, err := Rollback(context.Background(), opts)
			if err != nil {
				t.Fatalf("Rollback() = %v, want the recovery as the rollback", err)
			}
			if !res.Interrupted || !strings.Contains(res.Recovered, tc.wantSays) || !res.New.Equal(oldRel.Target) || !f.cur.Equal(oldRel.Target) {
				t.Errorf("Rollback() = %+v (active %s), want Interrupted, Recovered saying %q, on %s", res, f.cur, tc.wantSays, oldRel)
			}
			_, err = Rollback(context.Background(), opts)
			if !errors.Is(err, ErrNoUpgrade) {
				t.Errorf("second Rollback() = %v, want ErrNoUpgrade", err)
			}
			// After a rollback by the recovery, the refusal says so and
			// where the data written meanwhile is kept.
			if j, _ := ReadJournal(opts.RuntimeDir); tc.phase != PhaseStaged && (j == nil || !j.Recovered || err == nil || !strings.Contains(err.Error(), "undone by the recovery of the interrupted change") || !strings.Contains(err.Error(), "is kept in")) {
				t.Errorf("second Rollback() = %v (journal %+v), want it to say the recovery undid the change and where the data is kept", err, j)
			}
		})
	}
}

// TestUpgradeCarriesTransfer: the result of an upgrade carries what
// staging the new release fetched and reused, as Runtime.Stage said.
func TestUpgradeCarriesTransfer(t *testing.T) {
	f, opts := newFake(t)
	f.transfer = Transfer{Fetched: 1, Reused: 2, FetchedBytes: 10, ReusedBytes: 90}
	res, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Transfer != f.transfer {
		t.Errorf("Upgrade() transfer = %+v, want %+v", res.Transfer, f.transfer)
	}
}
