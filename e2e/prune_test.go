package e2e

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/units"
	"github.com/hermesbox/hbx/supervisor"
)

// diskUsage is what du counts under dir: the blocks of each inode once,
// symlinks not followed.
func diskUsage(dir string) int64 {
	seen := map[uint64]bool{}
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && !seen[st.Ino] {
				seen[st.Ino] = true
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// runtimeFootprint is the releases under releases/ (their names) and
// the bytes releases/ and the blob store take, logged as step.
func runtimeFootprint(t *testing.T, b *box, step string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(b.runtimeDir, "releases"))
	if err != nil {
		t.Fatal(err)
	}
	var rels []string
	for _, e := range ents {
		rels = append(rels, e.Name())
	}
	t.Logf("%s: %d releases, %s; blobs %s", step, len(rels),
		units.Bytes(diskUsage(filepath.Join(b.runtimeDir, "releases"))), units.Bytes(diskUsage(filepath.Join(b.runtimeDir, "blobs"))))
	return rels
}

// linked is the directory names current and previous point to.
func linked(t *testing.T, b *box) []string {
	t.Helper()
	var out []string
	for _, l := range []string{"current", "previous"} {
		target, err := os.Readlink(filepath.Join(b.runtimeDir, l))
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		out = append(out, filepath.Base(target))
	}
	slices.Sort(out)
	return out
}

// versionFile is where a release of the test image says its version.
const versionFile = "rootfs/app/apps/host-selfhost/VERSION"

// linkVersion is the version of the test image the link name (current,
// previous) points to.
func linkVersion(t *testing.T, b *box, name string) string {
	t.Helper()
	return strings.TrimSpace(readFile(t, filepath.Join(b.runtimeDir, name, versionFile)))
}

// releaseVersions is the versions of the releases under releases/,
// sorted.
func releaseVersions(t *testing.T, b *box) []string {
	t.Helper()
	rels, err := os.ReadDir(filepath.Join(b.runtimeDir, "releases"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rels {
		out = append(out, strings.TrimSpace(readFile(t, filepath.Join(b.runtimeDir, "releases", r.Name(), versionFile))))
	}
	slices.Sort(out)
	return out
}

// listedBlobs is the blob hexes the releases under releases/ list
// (release.json: index, manifest, config, layers).
func listedBlobs(t *testing.T, b *box) []string {
	t.Helper()
	var out []string
	rels, _ := os.ReadDir(filepath.Join(b.runtimeDir, "releases"))
	for _, r := range rels {
		var m struct {
			Index    string   `json:"index_digest"`
			Manifest string   `json:"manifest_digest"`
			Config   string   `json:"config_digest"`
			Layers   []string `json:"layers"`
		}
		if err := json.Unmarshal([]byte(readFile(t, filepath.Join(b.runtimeDir, "releases", r.Name(), "release.json"))), &m); err != nil {
			t.Fatal(err)
		}
		for _, d := range append([]string{m.Index, m.Manifest, m.Config}, m.Layers...) {
			if h := strings.TrimPrefix(d, "sha256:"); !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestUpgradesPruneReleasesE2E: after an upgrade, a rollback, an
// upgrade that fails health and rolls back by itself, and a release
// change by hbx install over existing data, releases/ holds
// only what current and previous name and the blob store only their
// blobs (before, the release rolled away from and its blobs stayed until
// a later hbx install); the successful commands say what they freed.
// The self-rollback points previous back at the release it named before
// (2.0.0), so the failed release is the one pruned (before, previous
// named the failed release and the good 2.0.0 went), and says in one
// line what it rolled back to and where the new release's log is.
func TestUpgradesPruneReleasesE2E(t *testing.T) {
	requireE2E(t)
	b, s, v1, v2, sick := upgradeBox(t)
	runtimeFootprint(t, b, "installed 1.0.0")
	check := func(step string, r result, wantNote bool) {
		t.Helper()
		rels := runtimeFootprint(t, b, step)
		slices.Sort(rels)
		if want := linked(t, b); !slices.Equal(rels, want) {
			t.Errorf("%s: releases/ = %q, want only current and previous %q", step, rels, want)
		}
		ents, _ := os.ReadDir(filepath.Join(b.runtimeDir, "blobs", "sha256"))
		var blobs []string
		for _, e := range ents {
			blobs = append(blobs, e.Name())
		}
		if want := listedBlobs(t, b); !slices.Equal(blobs, want) {
			t.Errorf("%s: blob store holds %d blobs, want the %d its releases list", step, len(blobs), len(want))
		}
		if wantNote && !strings.Contains(r.stdout, "pruned old releases: ") {
			t.Errorf("%s: output does not say what was pruned:\n%s", step, r.stdout)
		}
	}
	r := b.hbx("upgrade", "--image", v2)
	if r.code != 0 {
		t.Fatalf("hbx upgrade = %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	check("upgraded to 2.0.0", r, true)
	if r = b.hbx("rollback"); r.code != 0 {
		t.Fatalf("hbx rollback = %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	check("rolled back to 1.0.0", r, true)
	if r = b.hbx("upgrade", "--image", sick, "--no-rehearsal"); r.code != 1 { // past the rehearsal, to the self-rollback
		t.Fatalf("hbx upgrade to the sick image = %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	check("upgrade to 2.0.0-sick rolled back", r, false)
	if el := errorLines(t, r.stderr); len(el) != 1 || !strings.HasPrefix(el[0], "hbx: upgrade: rolled back to "+v1+": ") || !strings.HasSuffix(el[0], "; see hbx logs executor --stderr") {
		t.Errorf("the failed upgrade's error lines = %q, want one: rolled back to %s: <cause>; ...; see hbx logs executor --stderr", el, v1)
	}
	if !strings.Contains(r.stderr, "pruned old releases: removed 1 release") {
		t.Errorf("the failed upgrade's log does not say it pruned the 2.0.0-sick release:\n%s", r.stderr)
	}
	// previous names 2.0.0 again, as before the sick upgrade, not the
	// failed release; 2.0.0 stays, 2.0.0-sick went.
	if cur, prev := linkVersion(t, b, "current"), linkVersion(t, b, "previous"); cur != "1.0.0" || prev != "2.0.0" {
		t.Errorf("after the self-rollback: current %s, previous %s; want 1.0.0, 2.0.0", cur, prev)
	}
	if got := releaseVersions(t, b); !slices.Equal(got, []string{"1.0.0", "2.0.0"}) {
		t.Errorf("after the self-rollback releases/ holds %q, want 1.0.0 and 2.0.0", got)
	}

	// hbx install over the stopped Executor's data: a recorded change
	// to 2.0.0, which prunes 2.0.0-sick.
	if r := b.hbx("stop", "executor"); r.code != 0 {
		t.Fatalf("hbx stop executor = %d\n%s", r.code, r.stderr)
	}
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Stopped})
	plat := platform(t)
	if err := config.WritePin(b.config, v2, plat, versionImage(t, "2.0.0").Manifests[plat].String()); err != nil {
		t.Fatal(err)
	}
	if r = b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install over the stopped Executor = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	check("hbx install switched to 2.0.0", r, true)
}
