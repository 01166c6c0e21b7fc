package e2e

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/config"
)

// TestInstallDamagedCurrentE2E: when the active release's release.json is
// damaged (or current points to a release directory that is gone), hbx
// install of another image while Executor runs over its data must not
// swap the release under it without a backup: the guard treats "cannot
// read the active release" as "repair in place" even when the configured
// image is another one.
func TestInstallDamagedCurrentE2E(t *testing.T) {
	requireE2E(t)
	b, _, v1ref, v2ref, _ := upgradeBox(t)
	plat := "linux/" + runtime.GOARCH
	m1, m2 := testImage(t).Manifests[plat], versionImage(t, "2.0.0").Manifests[plat]
	v1cur := b.current()
	meta := filepath.Join(b.runtimeDir, v1cur, "release.json")
	if err := os.WriteFile(meta, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := config.WritePin(b.config, v2ref, plat, m2.String()); err != nil {
		t.Fatal(err)
	}
	r := b.hbx("install")
	t.Logf("hbx install (v2, damaged active release.json, Executor running) = %d: %s", r.code, lastLine(r.stderr))
	if got := b.current(); got != v1cur {
		t.Errorf("current -> %q, want %q: the release changed under the running Executor and its data without a backup (hbx install = %d)\n%s", got, v1cur, r.code, r.stdout)
	}
	if r.code == 0 || !strings.Contains(r.stderr, "hbx upgrade") {
		t.Errorf("hbx install = %d, want a refusal pointing to hbx upgrade", r.code)
	}

	// The same (pinned) release is still repaired in place.
	if err := config.WritePin(b.config, v1ref, plat, m1.String()); err != nil {
		t.Fatal(err)
	}
	if r := b.hbx("install"); r.code != 0 || b.current() != v1cur {
		t.Fatalf("hbx install (v1 pinned, damaged release.json) = %d, current %q; want the repair in place\n%s", r.code, b.current(), r.stderr)
	}
	// current dangling (its release directory removed): still no swap.
	if err := os.RemoveAll(filepath.Join(b.runtimeDir, v1cur)); err != nil {
		t.Fatal(err)
	}
	if err := config.WritePin(b.config, v2ref, plat, m2.String()); err != nil {
		t.Fatal(err)
	}
	r = b.hbx("install")
	t.Logf("hbx install (v2, dangling current, Executor running) = %d: %s", r.code, lastLine(r.stderr))
	if got := b.current(); got != v1cur || r.code == 0 {
		t.Errorf("dangling current: hbx install = %d, current -> %q; want a refusal and %q", r.code, got, v1cur)
	}
}
