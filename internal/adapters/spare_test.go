package adapters

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/upgrade"
)

// TestPreUpgradeBackupSparesThePriorArchive: the pre-upgrade backup of a
// change that follows a completed one leaves that one's archive (the
// spare the upgrade run passes, upgrade.Journal.Prior's), which hbx
// rollback restores when this change fails, whatever backup.keep says;
// before, with backup.keep 1, one failed upgrade after a completed one
// pruned it and hbx rollback refused ("pre-upgrade backup ...: no such
// file"). Without a spare, backup.keep applies to it as to any.
func TestPreUpgradeBackupSparesThePriorArchive(t *testing.T) {
	for _, spared := range []bool{true, false} {
		t.Run(fmt.Sprintf("spared %v", spared), func(t *testing.T) {
			var calls []string
			b := testBox(t, nil, &calls)
			b.Config.Backup.Dir, b.Config.Backup.Keep = filepath.Join(t.TempDir(), "backups"), 1
			if err := os.MkdirAll(b.Config.Executor.DataDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(b.Config.Executor.DataDir, "db"), []byte("v1 data"), 0o600); err != nil {
				t.Fatal(err)
			}
			d := &changeData{box: b, pass: []byte("test passphrase")}
			ctx := context.Background()
			first, err := d.Backup(ctx, upgrade.Release{}, "")
			if err != nil {
				t.Fatalf("Backup() = %v", err)
			}
			spare := ""
			if spared {
				spare = first
			}
			var last string
			for range 2 {
				time.Sleep(1100 * time.Millisecond) // archive names have whole seconds
				if last, err = d.Backup(ctx, upgrade.Release{}, spare); err != nil {
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
			want := []string{last}
			if spared {
				want = append(want, first)
			}
			if !slices.Equal(got, want) {
				t.Errorf("pre-upgrade archives after two more with backup.keep 1 = %q, want %q", got, want)
			}
		})
	}
}
