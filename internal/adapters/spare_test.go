package adapters

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/upgrade"
)

// TestPreUpgradeBackupSparesThePriorArchive: the pre-upgrade backup of a
// change that follows a completed one (upgrade.json's Prior) leaves that
// one's archive, which hbx rollback restores when this change fails,
// whatever backup.keep says; before, with backup.keep 1, one failed
// upgrade after a completed one pruned it and hbx rollback refused
// ("pre-upgrade backup ...: no such file").
func TestPreUpgradeBackupSparesThePriorArchive(t *testing.T) {
	var calls []string
	b := testBox(t, nil, &calls)
	b.Config.Backup.Dir, b.Config.Backup.Keep = filepath.Join(t.TempDir(), "backups"), 1
	if err := os.MkdirAll(b.Config.Executor.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.Config.Executor.DataDir, "db"), []byte("v1 data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(b.Config.Executor.RuntimeDir, 0o700); err != nil {
		t.Fatal(err)
	}
	d := &changeData{box: b, pass: []byte("test passphrase")}
	ctx := context.Background()
	first, err := d.Backup(ctx, upgrade.Release{})
	if err != nil {
		t.Fatalf("Backup() = %v", err)
	}
	done := &upgrade.Journal{Phase: upgrade.PhaseDone, Backup: first, Updated: time.Now()}
	failing := &upgrade.Journal{Phase: upgrade.PhaseStaged, Prior: done, Updated: time.Now()}
	body, err := json.Marshal(failing)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.Config.Executor.RuntimeDir, upgrade.JournalFile), body, 0o644); err != nil {
		t.Fatal(err)
	}
	var last string
	for range 2 {
		time.Sleep(1100 * time.Millisecond) // archive names have whole seconds
		if last, err = d.Backup(ctx, upgrade.Release{}); err != nil {
			t.Fatalf("Backup() = %v", err)
		}
	}
	list, err := backup.List(b.Config.Backup.Dir, PreUpgradeName)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range list {
		got = append(got, in.Path)
	}
	if len(got) != 2 || got[0] != last || got[1] != first {
		t.Errorf("pre-upgrade archives after two more with backup.keep 1 = %q, want %q and the prior change's %q", got, last, first)
	}
}
