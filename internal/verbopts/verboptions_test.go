package verbopts

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/config"
)

// TestBackupRestoreOptions: backup.* and executor.* keys become Create's and
// Restore's options, the pinned manifest that of the configured platform.
func TestBackupRestoreOptions(t *testing.T) {
	const img = "r.example/e:v1@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	const man = "sha256:3333333333333333333333333333333333333333333333333333333333333333"
	path := filepath.Join(t.TempDir(), "hbx.yaml")
	yaml := "executor:\n  image: \"" + img + "\"\n  platform: linux/amd64\n  platform_digests:\n    linux/amd64: \"" + man + "\"\n" +
		"backup:\n  dir: /b\n  name: box\n  keep: 3\n  keep_pre_restore: 2\n  compression: zstd\n  paths: [/srv/x]\n  lock_wait: 7s\n  health_wait: 9s\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Load(config.LoadOptions{Path: path, PathExplicit: true})
	if err != nil {
		t.Fatal(err)
	}
	want := backup.Options{DataDir: cfg.Executor.DataDir, Paths: []string{"/srv/x"}, RuntimeDir: cfg.Executor.RuntimeDir, StateDir: cfg.Executor.StateDir,
		Dir: "/b", Name: "box", Keep: 3, Compression: backup.Zstd, Encrypt: true, Image: img, Platform: "linux/amd64", PlatformDigest: man,
		LockWait: 7 * time.Second, HealthWait: 9 * time.Second}
	if diff := cmp.Diff(Backup(cfg), want, cmpopts.IgnoreUnexported(backup.Options{})); diff != "" {
		t.Errorf("Backup() (-got +want):\n%s", diff)
	}
	rwant := backup.RestoreOptions{Archive: "/b/a.tar.zst.gpg", DataDir: cfg.Executor.DataDir, RuntimeDir: cfg.Executor.RuntimeDir, StateDir: cfg.Executor.StateDir,
		BackupDir: "/b", AllowedPaths: []string{"/srv/x"}, KeepPreRestore: 2, HealthWait: 9 * time.Second, LockWait: 7 * time.Second,
		Image: img, Platform: "linux/amd64"}
	got := Restore(cfg, "/b/a.tar.zst.gpg")
	if diff := cmp.Diff(got, rwant, cmpopts.IgnoreUnexported(backup.RestoreOptions{}), cmpopts.IgnoreFields(backup.RestoreOptions{}, "AllowedRepository")); diff != "" {
		t.Errorf("Restore() (-got +want):\n%s", diff)
	}
	ref, _ := config.ParseImageRef(img)
	if got.AllowedRepository == nil || !got.AllowedRepository(ref.Name) || got.AllowedRepository("evil.example/y") {
		t.Errorf("Restore().AllowedRepository does not allow exactly executor.image's repository %s", ref.Name)
	}
}

// testOldRel and testNewRel are two releases of one image.
