package executorrun

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/launch"
)

// TestPrepareNamesHalfDoneRestore: where the executor cannot start
// because the active release is not the configured one while a restore
// is half done (its journal in phase swapping), the reason names the
// restore, its journal and the commands that undo it, never "run `hbx
// install` first" (issue 12: install follows the pin, not the data).
func TestPrepareNamesHalfDoneRestore(t *testing.T) {
	dir := t.TempDir()
	lo := launch.Options{RuntimeDir: filepath.Join(dir, "runtime"), DataDir: filepath.Join(dir, "data"), StateDir: filepath.Join(dir, "state")}
	if err := os.MkdirAll(lo.RuntimeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(context.Background(), lo, slog.New(slog.DiscardHandler)); !errors.Is(err, launch.ErrNotInstalled) || errors.Is(err, ErrRestoreInterrupted) {
		t.Fatalf("Prepare without a release or journal = %v, want only ErrNotInstalled", err)
	}
	j := map[string]any{"format": 1, "phase": "swapping", "started": time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "pid": 1, "archive": "/backups/x.tar.zst.gpg"}
	b, _ := json.Marshal(j)
	if err := os.WriteFile(lo.DataDir+".restore.json", b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Prepare(context.Background(), lo, slog.New(slog.DiscardHandler))
	if !errors.Is(err, ErrRestoreInterrupted) {
		t.Fatalf("Prepare with a half-done restore = %v, want ErrRestoreInterrupted", err)
	}
	msg := err.Error()
	for _, w := range []string{"a restore is half done", "/backups/x.tar.zst.gpg", "phase swapping", lo.DataDir + ".restore.json", "`hbx backup`", "`hbx supervise`", "do not run hbx install"} {
		if !strings.Contains(msg, w) {
			t.Errorf("Prepare says %q, want it to say %q", msg, w)
		}
	}
	if strings.Contains(msg, launch.ErrNotInstalled.Error()) {
		t.Errorf("Prepare says %q, want no %q", msg, launch.ErrNotInstalled)
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("Prepare's reason is not one line: %q", msg)
	}
}

// TestCheckRefusesAsPrepareAndCreatesNothing: Check, the supervisor's
// preflight of an executor restart, gives Prepare's reasons (no active
// release: ErrNotInstalled; a half-done restore named instead; data
// restored without its runtime: backup.ErrRuntimeAwaited) without
// creating the data or the state directory.
func TestCheckRefusesAsPrepareAndCreatesNothing(t *testing.T) {
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		journal map[string]any // <data_dir>.restore.json; nil for none
		want    error
		wantMsg string
	}{
		{"no release", nil, launch.ErrNotInstalled, "run `hbx install` first"},
		{"half-done restore", map[string]any{"format": 1, "phase": "swapping", "started": started, "pid": 1, "archive": "/backups/x.tar.zst.gpg"}, ErrRestoreInterrupted, "do not run hbx install"},
		{"runtime awaited", map[string]any{"format": 1, "phase": "not-started", "started": started, "pid": 1, "archive": "/backups/y.tar.zst.gpg",
			"awaiting": map[string]any{"image": "ghcr.io/example/executor:1", "index_digest": "sha256:" + strings.Repeat("a", 64), "platform": "linux/amd64"}}, backup.ErrRuntimeAwaited, "ghcr.io/example/executor:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			lo := launch.Options{RuntimeDir: filepath.Join(dir, "runtime"), DataDir: filepath.Join(dir, "data"), StateDir: filepath.Join(dir, "state")}
			if err := os.MkdirAll(lo.RuntimeDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.journal != nil {
				b, _ := json.Marshal(tc.journal)
				if err := os.WriteFile(lo.DataDir+".restore.json", b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := Check(lo)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Check() = %v; want %v saying %q", err, tc.want, tc.wantMsg)
			}
			for _, d := range []string{lo.DataDir, lo.StateDir} {
				if _, serr := os.Lstat(d); !errors.Is(serr, os.ErrNotExist) {
					t.Errorf("Lstat(%s) = %v after Check; want it not created", d, serr)
				}
			}
		})
	}
}
