package adapters

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/rehearse"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/release/releasetest"
	"github.com/hermesbox/hbx/upgrade"
)

// writeJSON writes v as JSON to path.
func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSuperviseRecoveryPrunes: a recovery by hbx supervise that did
// something (an upgrade interrupted before activation closed, a
// confirmed restore finished) prunes the releases as the interrupted
// command would have, logged in one line, and removes only what is
// neither current nor previous; a prune that fails (an unreadable restore
// journal) is one warning and no recovery failure; a start with nothing
// to recover prunes nothing.
func TestSuperviseRecoveryPrunes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		journal func(t *testing.T, rd, data string, ms map[string]release.Meta)
		recover func(ctx context.Context, b Box) bool // reports failure
		removed []string                              // releases gone
		line    string                                // the one prune line
	}{{
		name: "upgrade interrupted before activation",
		journal: func(t *testing.T, rd, _ string, ms map[string]release.Meta) {
			writeJSON(t, filepath.Join(rd, "upgrade.json"), map[string]any{"format": 1, "phase": "staged",
				"old": ms["cur"].Target(), "new": ms["staged"].Target()})
		},
		recover: func(ctx context.Context, b Box) bool { return b.RecoverUpgrade(ctx, false) },
		removed: []string{"staged", "junk"}, line: `level=INFO msg="pruned old releases: removed 2 releases (`,
	}, {
		name: "upgrade recovered, restore journal unreadable",
		journal: func(t *testing.T, rd, data string, ms map[string]release.Meta) {
			writeJSON(t, filepath.Join(rd, "upgrade.json"), map[string]any{"format": 1, "phase": "staged",
				"old": ms["cur"].Target(), "new": ms["staged"].Target()})
			if err := os.WriteFile(data+".restore.json", []byte("{not json"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		recover: func(ctx context.Context, b Box) bool { return b.RecoverUpgrade(ctx, false) },
		line:    `level=WARN msg="old releases not pruned: prune releases: `,
	}, {
		name: "confirmed restore finished",
		journal: func(t *testing.T, _, data string, _ map[string]release.Meta) {
			writeJSON(t, data+".restore.json", map[string]any{"format": 1, "phase": "committed", "archive": "a.tar.gz.gpg"})
		},
		recover: func(ctx context.Context, b Box) bool { return b.RecoverInterruptedRestore(ctx) != nil },
		removed: []string{"staged", "junk"}, line: `level=INFO msg="pruned old releases: removed 2 releases (`,
	}, {
		name:    "nothing to recover",
		journal: func(*testing.T, string, string, map[string]release.Meta) {},
		recover: func(ctx context.Context, b Box) bool { return b.RecoverUpgrade(ctx, false) },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			rd, data := filepath.Join(dir, "runtime"), filepath.Join(dir, "data")
			if err := os.Mkdir(data, 0o700); err != nil {
				t.Fatal(err)
			}
			ms := map[string]release.Meta{}
			for _, n := range []string{"cur", "prev", "staged", "junk"} {
				ms[n] = releasetest.Write(t, rd, n)
			}
			for link, n := range map[string]string{release.CurrentLink: "cur", release.PreviousLink: "prev"} {
				if err := os.Symlink(filepath.Join(release.ReleasesDir, ms[n].ManifestDigest.Encoded()), filepath.Join(rd, link)); err != nil {
					t.Fatal(err)
				}
			}
			tc.journal(t, rd, data, ms)
			cfg := config.Defaults()
			cfg.Executor.RuntimeDir, cfg.Executor.DataDir = rd, data
			cfg.Supervisor.Socket = filepath.Join(dir, "none.sock")
			var logs bytes.Buffer
			b := Box{Config: &cfg, Log: slog.New(slog.NewTextHandler(&logs, nil))}
			if failed := tc.recover(context.Background(), b); failed {
				t.Fatalf("recovery failed:\n%s", logs.String())
			}
			for n, m := range ms {
				_, err := os.Stat(filepath.Join(rd, release.ReleasesDir, m.ManifestDigest.Encoded()))
				if gone := os.IsNotExist(err); gone != slices.Contains(tc.removed, n) {
					t.Errorf("release %s gone = %v, want %v", n, gone, !gone)
				}
			}
			var lines []string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "old releases") {
					lines = append(lines, l)
				}
			}
			switch {
			case tc.line == "" && len(lines) != 0:
				t.Errorf("prune lines %q, want none", lines)
			case tc.line != "" && (len(lines) != 1 || !strings.Contains(lines[0], tc.line)):
				t.Errorf("prune lines %q, want one containing %q", lines, tc.line)
			}
		})
	}
}

// TestPruneReleasesLockHeld: with wait 0, PruneReleases gives up at once
// when another command holds the runtime directory's lock, removes
// nothing, and its note names the holder, not logged (the command prints
// it); PruneReleasesLogged logs it as one warning.
func TestPruneReleasesLockHeld(t *testing.T) {
	dir := t.TempDir()
	rd := filepath.Join(dir, "runtime")
	junk := releasetest.Write(t, rd, "junk")
	lk, err := release.LockExisting(context.Background(), rd, "hbx upgrade (test)", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock()
	cfg := config.Defaults()
	cfg.Executor.RuntimeDir, cfg.Executor.DataDir = rd, filepath.Join(dir, "data")
	var logs bytes.Buffer
	b := Box{Config: &cfg, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	note := b.PruneReleases(context.Background(), SupervisorCommand, 0)
	if !strings.HasPrefix(note, "old releases not pruned: ") || !strings.Contains(note, "hbx upgrade (test)") {
		t.Errorf("PruneReleases(lock held) = %q, want it to say nothing was pruned and name the holder", note)
	}
	if _, err := os.Stat(filepath.Join(rd, release.ReleasesDir, junk.ManifestDigest.Encoded())); err != nil {
		t.Errorf("junk release after a refused prune: %v", err)
	}
	// The note is the command's to print: not logged too.
	if strings.Contains(logs.String(), "not pruned") {
		t.Errorf("PruneReleases logged its note:\n%s", logs.String())
	}
	// Without a result to print it in, it is one warning.
	b.PruneReleasesLogged(context.Background(), SupervisorCommand, 0)
	if got := strings.Count(logs.String(), "level=WARN"); got != 1 || !strings.Contains(logs.String(), "old releases not pruned: ") {
		t.Errorf("PruneReleasesLogged: %d warnings logged, want 1 with the note:\n%s", got, logs.String())
	}
}

// TestPruneAfterFailure: a command whose release change rolled itself
// back (hbx install's Switch among them) or whose rehearsal refused the
// release prunes as a change that completed does, logged in one line:
// the release neither current nor previous goes. Another failure prunes
// nothing. Before, hbx install pruned only after a refused rehearsal, so
// a release change that rolled itself back left its failed release.
func TestPruneAfterFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		pruned bool
	}{
		{name: "install rolled itself back", err: fmt.Errorf("install: %w to r/e:v1: activate: boom", upgrade.ErrRolledBack), pruned: true},
		{name: "rehearsal refused", err: fmt.Errorf("rehearse r/e:v2: %w", rehearse.ErrRefused), pruned: true},
		{name: "other failure", err: errors.New("stage r/e:v2: no route to host")},
		{name: "no failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			rd := filepath.Join(dir, "runtime")
			ms := map[string]release.Meta{}
			for _, n := range []string{"cur", "prev", "failed"} {
				ms[n] = releasetest.Write(t, rd, n)
			}
			for link, n := range map[string]string{release.CurrentLink: "cur", release.PreviousLink: "prev"} {
				if err := os.Symlink(filepath.Join(release.ReleasesDir, ms[n].ManifestDigest.Encoded()), filepath.Join(rd, link)); err != nil {
					t.Fatal(err)
				}
			}
			cfg := config.Defaults()
			cfg.Executor.RuntimeDir, cfg.Executor.DataDir = rd, filepath.Join(dir, "data")
			var logs bytes.Buffer
			b := Box{Config: &cfg, Log: slog.New(slog.NewTextHandler(&logs, nil))}
			if got := b.PruneAfterFailure(context.Background(), "hbx install", 0, tc.err); got != tc.pruned {
				t.Errorf("PruneAfterFailure(%v) = %v, want %v", tc.err, got, tc.pruned)
			}
			for n, m := range ms {
				_, err := os.Stat(filepath.Join(rd, release.ReleasesDir, m.ManifestDigest.Encoded()))
				if gone, want := os.IsNotExist(err), tc.pruned && n == "failed"; gone != want {
					t.Errorf("release %s gone = %v, want %v", n, gone, want)
				}
			}
			if n := strings.Count(logs.String(), "pruned old releases: removed 1 release"); n != map[bool]int{true: 1}[tc.pruned] {
				t.Errorf("log says what was pruned %d times, want it once when pruned:\n%s", n, logs.String())
			}
		})
	}
}
