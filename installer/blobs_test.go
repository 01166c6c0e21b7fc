package installer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/release"
)

// cachedBlobs lists the complete blobs in the runtime directory's cache,
// by digest hex.
func cachedBlobs(t *testing.T, runtimeDir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(filepath.Join(runtimeDir, release.BlobsDir), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !atomicfile.IsTemp(d.Name()) {
			out = append(out, d.Name())
		}
		return nil
	})
	slices.Sort(out)
	return out
}

// layersOf lists the blob digests (hex) the releases under releases/
// name: their index, manifest, config and layers.
func layersOf(t *testing.T, runtimeDir string) []string {
	t.Helper()
	var out []string
	rels, _ := os.ReadDir(filepath.Join(runtimeDir, release.ReleasesDir))
	for _, r := range rels {
		inst, err := release.Open(filepath.Join(runtimeDir, release.ReleasesDir, r.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m := inst.Meta
		for _, l := range append([]digest.Digest{m.IndexDigest, m.ManifestDigest, m.ConfigDigest}, m.Layers...) {
			if !slices.Contains(out, l.Encoded()) {
				out = append(out, l.Encoded())
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestStagingOnFullDiskDropsBlobs: a staging (an upgrade's StageOnly) that
// fills the disk leaves no blob of its own on it, neither by default (no
// blob cache at all) nor with KeepBlobs (only blobs of releases that
// exist); the active release is untouched.
func TestStagingOnFullDiskDropsBlobs(t *testing.T) {
	for _, keep := range []bool{false, true} {
		e := newEnv(t)
		e.runtime = filepath.Join(testenv.Tmpfs(t, "300m"), "runtime")
		p1 := e.reg.publish(t, "executor", goodParts(hostPlat))
		if _, err := Install(context.Background(), e.opts(p1, func(o *Options) { o.KeepBlobs = keep })); err != nil {
			t.Fatal(err)
		}
		first := currentTarget(t, e.runtime)
		parts := goodParts(hostPlat)
		// 320 MiB of zeros: a few hundred KiB compressed, so the early
		// estimate passes and the disk fills while the layer is applied.
		parts.layers = append(parts.layers, layerSpec{tar: tartest.New().File("big", strings.Repeat("\x00", 320<<20), 0o644).Bytes()})
		p2 := e.reg.publish(t, "executor", parts)
		_, err := Install(context.Background(), e.opts(p2, func(o *Options) {
			o.MaxUncompressedBytes, o.StageOnly, o.KeepBlobs = 1<<30, true, keep
		}))
		if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "removed") {
			t.Fatalf("keep_blobs %v: Install(StageOnly) = %v, want ErrNoSpace saying the blobs were removed", keep, err)
		}
		want := []string(nil)
		if keep {
			want = layersOf(t, e.runtime) // p1's
		}
		if got := cachedBlobs(t, e.runtime); !slices.Equal(got, want) {
			t.Errorf("keep_blobs %v: blobs after the full disk %q, want %q", keep, got, want)
		}
		if currentTarget(t, e.runtime) != first {
			t.Errorf("keep_blobs %v: current moved", keep)
		}
	}
}

// TestBlobsOfAFailedStagingGoNextRun: blobs a failed run kept for the
// next one (here: a staging refused for a bad diff_id after fetching)
// do not survive the next successful staging, and a successful staging
// keeps no blob of its own either (default), or only those of releases
// that exist (KeepBlobs).
func TestBlobsOfAFailedStagingGoNextRun(t *testing.T) {
	for _, keep := range []bool{false, true} {
		e := newEnv(t)
		p1 := e.reg.publish(t, "executor", goodParts(hostPlat))
		if _, err := Install(context.Background(), e.opts(p1, func(o *Options) { o.KeepBlobs = keep })); err != nil {
			t.Fatal(err)
		}
		bad := goodParts(hostPlat)
		bad.layers = append(bad.layers, layerSpec{tar: tartest.New().File("extra", "a layer of no release", 0o644).Bytes()},
			layerSpec{tar: tartest.New().File("odd", "odd", 0o644).Bytes(), wrongDiff: true})
		pb := e.reg.publish(t, "executor", bad)
		// ExtractAll: p1's layers are fetched again, not reused from its release.
		if _, err := Install(context.Background(), e.opts(pb, func(o *Options) { o.StageOnly, o.KeepBlobs, o.ExtractAll = true, keep, true })); err == nil {
			t.Fatalf("keep_blobs %v: staging an image with a wrong diff_id succeeded", keep)
		}
		if got := cachedBlobs(t, e.runtime); len(got) <= len(layersOf(t, e.runtime)) {
			t.Fatalf("keep_blobs %v: the failed staging kept no blob of its own (%q); the test needs one", keep, got)
		}
		parts := goodParts(hostPlat)
		parts.config.Env = append(parts.config.Env, "VERSION=2")
		p2 := e.reg.publish(t, "executor", parts)
		res, err := Install(context.Background(), e.opts(p2, func(o *Options) { o.StageOnly, o.KeepBlobs = true, keep }))
		if err != nil {
			t.Fatal(err)
		}
		want := []string(nil)
		if keep {
			want = layersOf(t, e.runtime) // p1's and p2's
		}
		if got := cachedBlobs(t, e.runtime); !slices.Equal(got, want) {
			t.Errorf("keep_blobs %v: blobs after the next staging %q, want %q", keep, got, want)
		}
		if err := Activate(context.Background(), e.runtime, res.Release.Meta.ManifestDigest, 0); err != nil {
			t.Fatal(err)
		}
		// A warm install (hbx supervise's install_on_start) after the
		// activation keeps the rule.
		if _, err := Install(context.Background(), e.opts(p2, func(o *Options) { o.KeepBlobs = keep })); err != nil {
			t.Fatal(err)
		}
		if got := cachedBlobs(t, e.runtime); !slices.Equal(got, want) {
			t.Errorf("keep_blobs %v: blobs after the warm install %q, want %q", keep, got, want)
		}
	}
}
