package box

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/upgrade"
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
	if diff := cmp.Diff(backupOptions(cfg), want, cmpopts.IgnoreUnexported(backup.Options{})); diff != "" {
		t.Errorf("backupOptions() (-got +want):\n%s", diff)
	}
	rwant := backup.RestoreOptions{Archive: "/b/a.tar.zst.gpg", DataDir: cfg.Executor.DataDir, RuntimeDir: cfg.Executor.RuntimeDir, StateDir: cfg.Executor.StateDir,
		BackupDir: "/b", AllowedPaths: []string{"/srv/x"}, KeepPreRestore: 2, HealthWait: 9 * time.Second, LockWait: 7 * time.Second,
		Image: img, Platform: "linux/amd64"}
	got := restoreOptions(cfg, "/b/a.tar.zst.gpg")
	if diff := cmp.Diff(got, rwant, cmpopts.IgnoreUnexported(backup.RestoreOptions{}), cmpopts.IgnoreFields(backup.RestoreOptions{}, "AllowedRepository")); diff != "" {
		t.Errorf("restoreOptions() (-got +want):\n%s", diff)
	}
	ref, _ := config.ParseImageRef(img)
	if got.AllowedRepository == nil || !got.AllowedRepository(ref.Name) || got.AllowedRepository("evil.example/y") {
		t.Errorf("restoreOptions().AllowedRepository does not allow exactly executor.image's repository %s", ref.Name)
	}
}

// testOldRel and testNewRel are two releases of one image.
var (
	testOldRel = upgrade.Release{Target: release.Target{Image: "r/e:v1@" + string(digest.FromString("i1")), Platform: "linux/amd64", IndexDigest: digest.FromString("i1"), ManifestDigest: digest.FromString("m1")}}
	testNewRel = upgrade.Release{Target: release.Target{Image: "r/e:v2@" + string(digest.FromString("i2")), Platform: "linux/amd64", IndexDigest: digest.FromString("i2"), ManifestDigest: digest.FromString("m2")}}
)

// TestGateChecks: the checks that gate a change, mcp-tools only with a
// key and never twice.
func TestGateChecks(t *testing.T) {
	d := config.Defaults()
	c := &d
	base := []string{c.Health.Readiness, "mcp-auth", "supervisor", "release"}
	if got := gateChecks(c); !slices.Equal(got, base) {
		t.Errorf("without a key: %v, want %v", got, base)
	}
	c.Health.TokenFile = "/k"
	if got := gateChecks(c); !slices.Equal(got, append(slices.Clone(base), "mcp-tools")) {
		t.Errorf("with a key: %v, want mcp-tools last", got)
	}
	c.Health.Readiness = "mcp-tools"
	if got := gateChecks(c); !slices.Equal(got, []string{"mcp-tools", "mcp-auth", "supervisor", "release"}) {
		t.Errorf("readiness mcp-tools: %v, want it once", got)
	}
}

// TestToolsInAndPinned: the tool set in force once r is pinned, and the
// configuration with r pinned, leaving cfg as it was.
func TestToolsInAndPinned(t *testing.T) {
	d := config.Defaults()
	c := &d
	c.Health.MCPTools = []string{"execute"}
	for _, tc := range []struct {
		name       string
		tools      *upgrade.Tools
		overridden bool
		want       []string
	}{
		{"not recorded", nil, false, []string{"execute"}},
		{"recorded default", &upgrade.Tools{}, false, config.Defaults().Health.MCPTools},
		{"recorded", &upgrade.Tools{Names: []string{"a", "b"}}, false, []string{"a", "b"}},
		{"overridden", &upgrade.Tools{Names: []string{"a", "b"}}, true, []string{"execute"}},
	} {
		r := testOldRel
		r.MCPTools = tc.tools
		if got := toolsIn(c, r, tc.overridden); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ToolsIn = %v, want %v", tc.name, got, tc.want)
		}
	}
	p := withPin(c, testNewRel)
	if p.Executor.Image != testNewRel.Image || p.Executor.PlatformDigests[c.PinKey()] != testNewRel.ManifestDigest.String() {
		t.Errorf("Pinned = %s %v, want %s pinned to %s", p.Executor.Image, p.Executor.PlatformDigests, testNewRel.Image, testNewRel.ManifestDigest)
	}
	if c.Executor.Image == testNewRel.Image || c.Executor.PlatformDigests[c.PinKey()] == testNewRel.ManifestDigest.String() {
		t.Errorf("Pinned changed cfg")
	}
}
