package guardedinstall

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/adapters"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/upgrade"
)

// image is a digest-pinned executor.image on a registry nothing listens
// on: a test that reaches the registry fails with another error.
const image = "127.0.0.1:1/hbx/executor:v2@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// testBox is a box in t.TempDir(): runtime and data directories (not
// made), a socket nothing listens on.
func testBox(t *testing.T) adapters.Box {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "hbx.yaml")
	body := "executor:\n  image: \"" + image + "\"\n  runtime_dir: " + filepath.Join(dir, "runtime") + "\n  data_dir: " + filepath.Join(dir, "data") +
		"\n  state_dir: " + filepath.Join(dir, "state") + "\nsupervisor:\n  socket: " + filepath.Join(dir, "s.sock") + "\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Load(config.LoadOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	return adapters.Box{Config: cfg, Log: slog.New(slog.DiscardHandler)}
}

// target is a release named by its manifest digest (64 times c).
func target(c string) release.Target {
	return release.Target{Image: "reg/executor:" + c, ManifestDigest: digest.Digest("sha256:" + strings.Repeat(c, 64))}
}

// writeJournal writes body as runtimeDir's upgrade.json, making the
// directory; a *upgrade.Journal body is encoded.
func writeJournal(t *testing.T, runtimeDir string, body any) {
	t.Helper()
	b, ok := body.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(runtimeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(runtimeDir, upgrade.JournalFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// halfDone is a release change from a to b interrupted while activating.
func halfDone(phase upgrade.Phase) *upgrade.Journal {
	now := time.Now().UTC()
	return &upgrade.Journal{Phase: phase, Old: upgrade.Release{Target: target("a")}, New: upgrade.Release{Target: target("b")}, Started: now, Updated: now, By: "hbx install"}
}

// listing is what is under dir, by name ("" when dir does not exist).
func listing(t *testing.T, dir string) string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		names = append(names, p)
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(names, "\n")
}

// TestInstallRefusesHalfDone: the guarded install refuses, nothing
// changed, while upgrade.json records an unfinished release change or
// does not read: before it takes the runtime directory's lock (an
// interrupted change: "run `hbx rollback`"; one whose command holds the
// lock: "let it finish first"; a journal that does not parse: its read
// error), and again under the lock, when the journal was written while it
// waited for the lock (the change is then interrupted, whoever held it).
func TestInstallRefusesHalfDone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		journal any  // written before the install; nil: none
		late    any  // written while the install waits for the lock, then the lock let go
		hold    bool // the lock held across the install (lock wait 0)
		want    []string
		halfErr bool // the error wraps upgrade.ErrHalfDone
	}{
		{name: "interrupted", journal: halfDone(upgrade.PhaseActivating), halfErr: true,
			want: []string{"was interrupted in phase activating", "run `hbx rollback`", "; nothing changed"}},
		{name: "rolling back", journal: halfDone(upgrade.PhaseRollingBack), halfErr: true,
			want: []string{"was interrupted in phase rolling-back", "; nothing changed"}},
		{name: "in progress under another's lock", journal: halfDone(upgrade.PhaseStaged), hold: true, halfErr: true,
			want: []string{"is in progress (phase staged", "let it finish first", "; nothing changed"}},
		{name: "unreadable journal", journal: []byte("{not json"),
			want: []string{"upgrade journal", "does not parse", "move it away"}},
		{name: "journal of another format", journal: []byte(`{"format": 99}`),
			want: []string{"upgrade journal", "format 99"}},
		{name: "written while waiting for the lock", late: halfDone(upgrade.PhaseBackedUp), halfErr: true,
			want: []string{"was interrupted in phase backed-up", "; nothing changed"}},
		{name: "unreadable, written while waiting for the lock", late: []byte("[]"),
			want: []string{"upgrade journal", "does not parse"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBox(t)
			rt := b.Config.Executor.RuntimeDir
			if tc.journal != nil {
				writeJournal(t, rt, tc.journal)
			}
			var waiting atomic.Int32
			opts := installer.Options{Image: image, Platform: b.Config.Executor.Platform, RuntimeDir: rt, LockWait: 2 * time.Minute,
				Logger: slog.New(testenv.MessageCounter{Handler: slog.DiscardHandler, Sub: "waiting for the runtime directory's lock", N: &waiting})}
			if tc.hold || tc.late != nil {
				if err := os.MkdirAll(rt, 0o755); err != nil {
					t.Fatal(err)
				}
				lk, err := lock.Acquire(context.Background(), filepath.Join(rt, release.LockFile), "hbx upgrade", 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer lk.Unlock()
				if tc.late != nil {
					go func() {
						for deadline := time.Now().Add(time.Minute); waiting.Load() == 0 && time.Now().Before(deadline); {
							time.Sleep(5 * time.Millisecond)
						}
						writeJournal(t, rt, tc.late)
						lk.Unlock()
					}()
				}
			}
			before := listing(t, rt)
			out, err := Install(context.Background(), b, opts, true, false, nil)
			if err == nil {
				t.Fatalf("Install() = %+v, nil; want it refused", out)
			}
			if errors.Is(err, upgrade.ErrHalfDone) != tc.halfErr {
				t.Errorf("Install() = %v; wraps upgrade.ErrHalfDone: %v, want %v", err, !tc.halfErr, tc.halfErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Install() = %q, want it to say %q", err, w)
				}
			}
			if tc.late != nil && waiting.Load() == 0 {
				t.Errorf("the install did not wait for the lock")
			}
			after := listing(t, rt)
			if tc.late != nil {
				before = after // the journal written meanwhile; nothing else may change
				if strings.Contains(after, release.ReleasesDir) {
					t.Errorf("runtime directory after the refusal:\n%s\nwant no releases directory", after)
				}
			}
			if after != before {
				t.Errorf("runtime directory changed by the refusal:\n%s\nwant\n%s", after, before)
			}
		})
	}
}

// TestKeepNeeded: the install's cleanup (installer.Options.Keep) keeps
// the releases an unfinished release change (both sides) or an awaited
// restore names, read when it runs, and every release when upgrade.json
// or the restore journal does not read (it cannot know which are
// needed); a finished change keeps none.
func TestKeepNeeded(t *testing.T) {
	a, bb, c := target("a"), target("b"), target("c")
	for _, tc := range []struct {
		name     string
		upgrade  any    // upgrade.json; nil: none
		restore  string // the data directory's restore journal; "": none
		wantKeep []release.Target
	}{
		{name: "no journal"},
		{name: "finished change", upgrade: halfDone(upgrade.PhaseDone)},
		{name: "unfinished change", upgrade: halfDone(upgrade.PhaseActivating), wantKeep: []release.Target{a, bb}},
		{name: "unreadable upgrade.json", upgrade: []byte("{not json"), wantKeep: []release.Target{a, bb, c}},
		{name: "upgrade.json of another format", upgrade: []byte(`{"format": 99}`), wantKeep: []release.Target{a, bb, c}},
		{name: "unreadable restore journal", restore: "{", wantKeep: []release.Target{a, bb, c}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := testBox(t)
			cfg := box.Config
			if err := os.MkdirAll(cfg.Executor.RuntimeDir, 0o755); err != nil {
				t.Fatal(err)
			}
			keep := keepNeeded(cfg) // the journals are read when it runs, not now
			if tc.upgrade != nil {
				writeJournal(t, cfg.Executor.RuntimeDir, tc.upgrade)
			}
			if tc.restore != "" {
				if err := os.WriteFile(datadir.Journal(cfg.Executor.DataDir), []byte(tc.restore), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			for _, tg := range []release.Target{a, bb, c} {
				want := false
				for _, k := range tc.wantKeep {
					want = want || k == tg
				}
				if got := keep(release.Meta{Image: tg.Image, ManifestDigest: tg.ManifestDigest}); got != want {
					t.Errorf("keep(%s) = %v, want %v", tg.Image, got, want)
				}
			}
		})
	}
}
