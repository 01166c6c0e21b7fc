package installer

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/release"
)

// storedBlob is the path of blob d in the runtime directory's store.
func storedBlob(runtimeDir string, d digest.Digest) string {
	return filepath.Join(runtimeDir, release.BlobsDir, string(d.Algorithm()), d.Encoded())
}

// damage flips one byte in the middle of the stored blob d, keeping its
// size: a blob a power loss or a rotting disk left under its name.
func damage(t *testing.T, runtimeDir string, d digest.Digest) {
	t.Helper()
	p := storedBlob(runtimeDir, d)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// v2Parts is goodParts with a third layer: an upgrade over the same base.
func v2Parts() imageParts {
	parts := goodParts(hostPlat)
	parts.layers = append(parts.layers, layerSpec{tar: tartest.New().File("app/v2", "the new top layer", 0o644).Bytes()})
	return parts
}

// TestUpgradeFetchesOnlyNewLayers: with KeepBlobs, staging an image that
// shares its first layers with the active one downloads only the new
// layer, and the result counts the layer bytes fetched and reused; the
// store holds the index, manifest, config and layers of both releases.
func TestUpgradeFetchesOnlyNewLayers(t *testing.T) {
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", goodParts(hostPlat))
	res, err := Install(context.Background(), e.opts(p1, func(o *Options) { o.KeepBlobs = true }))
	if err != nil {
		t.Fatal(err)
	}
	shared := e.reg.published(t, p1, 0).Size + e.reg.published(t, p1, 1).Size
	if res.Fetched != 2 || res.FetchedBytes != shared || res.ReusedBytes != 0 {
		t.Errorf("cold install: fetched %d blobs, %d bytes, reused %d bytes; want 2, %d, 0", res.Fetched, res.FetchedBytes, res.ReusedBytes, shared)
	}
	p2 := e.reg.publish(t, "executor", v2Parts())
	before := e.reg.blobRequests()
	res, err = Install(context.Background(), e.opts(p2, func(o *Options) { o.KeepBlobs, o.StageOnly = true, true }))
	if err != nil {
		t.Fatal(err)
	}
	top := e.reg.published(t, p2, 2)
	if res.Fetched != 1 || res.Reused != 2 || res.FetchedBytes != top.Size || res.ReusedBytes != shared {
		t.Errorf("upgrade: fetched %d blobs (%d bytes), reused %d (%d bytes); want 1 (%d), 2 (%d)", res.Fetched, res.FetchedBytes, res.Reused, res.ReusedBytes, top.Size, shared)
	}
	// The config and the new layer; the index and manifest are manifest requests.
	if n := e.reg.blobRequests() - before; n != 2 {
		t.Errorf("upgrade made %d blob requests, want 2 (config, new layer)", n)
	}
	if got, want := cachedBlobs(t, e.runtime), layersOf(t, e.runtime); !slices.Equal(got, want) || len(want) != 2*3+3 {
		t.Errorf("store after the upgrade %q, want the 9 blobs of both releases %q", got, want)
	}
}

// TestDamagedKeptBlobIsFetchedAgain: a kept layer blob whose bytes no
// longer match its digest (same size) is not reused: it is fetched again
// and the staging succeeds.
func TestDamagedKeptBlobIsFetchedAgain(t *testing.T) {
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", goodParts(hostPlat))
	if _, err := Install(context.Background(), e.opts(p1, func(o *Options) { o.KeepBlobs = true })); err != nil {
		t.Fatal(err)
	}
	base := e.reg.published(t, p1, 0)
	damage(t, e.runtime, base.Digest)
	p2 := e.reg.publish(t, "executor", v2Parts())
	res, err := Install(context.Background(), e.opts(p2, func(o *Options) { o.KeepBlobs, o.StageOnly, o.ExtractAll = true, true, true }))
	if err != nil {
		t.Fatalf("staging over a damaged kept blob: %v", err)
	}
	if res.Fetched != 2 || res.Reused != 1 {
		t.Errorf("fetched %d, reused %d; want 2 (the damaged base and the new layer), 1", res.Fetched, res.Reused)
	}
	if err := (blobCache{dir: filepath.Join(e.runtime, release.BlobsDir)}).check(base.Digest); err != nil {
		t.Errorf("the base layer's blob after the staging: %v", err)
	}
}

// TestVerifyChecksKeptBlobs: Install with Verify re-hashes the kept
// blobs; a damaged one of the active release is removed and fetched anew
// from the registry, without staging the release again (the release
// directory is the same), and the store matches afterwards.
func TestVerifyChecksKeptBlobs(t *testing.T) {
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", goodParts(hostPlat))
	if _, err := Install(context.Background(), e.opts(p1, func(o *Options) { o.KeepBlobs = true })); err != nil {
		t.Fatal(err)
	}
	res, err := Install(context.Background(), e.opts(p1, func(o *Options) { o.KeepBlobs, o.Verify = true, true }))
	if err != nil || res.Changed {
		t.Fatalf("Install(Verify) on an intact store = %+v, %v; want no change", res, err)
	}
	app := e.reg.published(t, p1, 1)
	damage(t, e.runtime, app.Digest)
	damage(t, e.runtime, res.Release.Meta.ConfigDigest)
	before, requests := releaseStamp(t, e.runtime), e.reg.blobRequests()
	res, err = Install(context.Background(), e.opts(p1, func(o *Options) { o.KeepBlobs, o.Verify = true, true }))
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed || !strings.Contains(res.Reason, "fetched 2 missing or damaged kept blobs") || res.Fetched != 1 || res.FetchedBytes != app.Size || res.Refetched != 2 {
		t.Errorf("Install(Verify) over a damaged layer and config = changed %v, reason %q, fetched %d (%d bytes); want no change, 2 blobs fetched again (Refetched %d), 1 layer (%d bytes)", res.Changed, res.Reason, res.Fetched, res.FetchedBytes, res.Refetched, app.Size)
	}
	if n := e.reg.blobRequests() - requests; n != 2 {
		t.Errorf("repair made %d blob requests, want 2 (config, damaged layer)", n)
	}
	if after := releaseStamp(t, e.runtime); after != before {
		t.Errorf("the active release was staged again (release.json %q, was %q)", after, before)
	}
	if bad, err := (blobCache{dir: filepath.Join(e.runtime, release.BlobsDir)}).verifyAll(); err != nil || len(bad) != 0 {
		t.Errorf("store after the repair: bad %v, err %v", bad, err)
	}

	// A damaged blob of the previous release only is removed; the active
	// release stays as it is.
	p2 := e.reg.publish(t, "executor", v2Parts())
	if _, err := Install(context.Background(), e.opts(p2, func(o *Options) { o.KeepBlobs = true })); err != nil {
		t.Fatal(err)
	}
	prev, err := release.Link(e.runtime, release.PreviousLink)
	if err != nil {
		t.Fatal(err)
	}
	damage(t, e.runtime, prev.Meta.ConfigDigest)
	res, err = Install(context.Background(), e.opts(p2, func(o *Options) { o.KeepBlobs, o.Verify = true, true }))
	if err != nil || res.Changed {
		t.Fatalf("Install(Verify) over a damaged blob of previous = %+v, %v; want no change", res, err)
	}
	if _, err := os.Stat(storedBlob(e.runtime, prev.Meta.ConfigDigest)); !os.IsNotExist(err) {
		t.Errorf("the damaged blob of previous is still stored: %v", err)
	}
}

// releaseStamp is the active release's installed_at: it changes only when
// the release is staged again.
func releaseStamp(t *testing.T, runtimeDir string) string {
	t.Helper()
	cur, err := release.Current(runtimeDir)
	if err != nil {
		t.Fatal(err)
	}
	return cur.Meta.InstalledAt.String()
}

// TestVerifyFetchesMissingKeptBlobs: a release installed without kept
// blobs (install.keep_blobs off) gets them with Verify once KeepBlobs is
// on: the index, manifest, config and every layer are in the store
// afterwards, hashed to their names, and the release is not staged again.
// Without KeepBlobs, Verify fetches nothing.
func TestVerifyFetchesMissingKeptBlobs(t *testing.T) {
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", goodParts(hostPlat))
	if _, err := Install(context.Background(), e.opts(p1, func(*Options) {})); err != nil {
		t.Fatal(err)
	}
	if got := cachedBlobs(t, e.runtime); len(got) != 0 {
		t.Fatalf("store after an install without KeepBlobs: %q, want none", got)
	}
	res, err := Install(context.Background(), e.opts(p1, func(o *Options) { o.Verify = true }))
	if err != nil || res.Changed || res.Fetched != 0 {
		t.Fatalf("Install(Verify) without KeepBlobs = %+v, %v; want nothing fetched", res, err)
	}
	before := releaseStamp(t, e.runtime)
	res, err = Install(context.Background(), e.opts(p1, func(o *Options) { o.KeepBlobs, o.Verify = true, true }))
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed || res.Fetched != 2 || !strings.Contains(res.Reason, "fetched 5 missing or damaged kept blobs") {
		t.Errorf("Install(Verify, KeepBlobs) = changed %v, fetched %d, reason %q; want no change, 2 layers, 5 blobs", res.Changed, res.Fetched, res.Reason)
	}
	if got, want := cachedBlobs(t, e.runtime), layersOf(t, e.runtime); !slices.Equal(got, want) || len(want) != 5 {
		t.Errorf("store after Install(Verify, KeepBlobs) %q, want the release's 5 blobs %q", got, want)
	}
	if bad, err := (blobCache{dir: filepath.Join(e.runtime, release.BlobsDir)}).verifyAll(); err != nil || len(bad) != 0 {
		t.Errorf("store after the repair: bad %v, err %v", bad, err)
	}
	if after := releaseStamp(t, e.runtime); after != before {
		t.Errorf("the active release was staged again (installed_at %q, was %q)", after, before)
	}
	if _, err := os.Stat(filepath.Join(e.runtime, release.ScratchDir)); !os.IsNotExist(err) {
		t.Errorf("the repair left %s/: %v", release.ScratchDir, err)
	}
}

// TestVerifyCountsEachKeptBlobOnce: an image whose manifest names one
// layer blob twice (two identical layers) has that blob once in the
// store; --verify over it damaged fetches it once and says so (Refetched
// and Fetched count blobs, not the manifest's mentions of them).
func TestVerifyCountsEachKeptBlobOnce(t *testing.T) {
	e := newEnv(t)
	parts := goodParts(hostPlat)
	parts.layers = append(parts.layers, parts.layers[1])
	p := e.reg.publish(t, "executor", parts)
	if _, err := Install(context.Background(), e.opts(p, func(o *Options) { o.KeepBlobs = true })); err != nil {
		t.Fatal(err)
	}
	app := e.reg.published(t, p, 1)
	if e.reg.published(t, p, 2).Digest != app.Digest {
		t.Fatal("the test image's last two layers differ")
	}
	damage(t, e.runtime, app.Digest)
	requests := e.reg.blobRequests()
	res, err := Install(context.Background(), e.opts(p, func(o *Options) { o.KeepBlobs, o.Verify = true, true }))
	if err != nil {
		t.Fatal(err)
	}
	if res.Refetched != 1 || res.Fetched != 1 || res.FetchedBytes != app.Size || !strings.HasSuffix(res.Reason, "fetched 1 missing or damaged kept blob") {
		t.Errorf("Install(Verify) over the damaged twice-named layer: Refetched %d, Fetched %d (%d bytes), reason %q; want 1, 1 (%d bytes)",
			res.Refetched, res.Fetched, res.FetchedBytes, res.Reason, app.Size)
	}
	if n := e.reg.blobRequests() - requests; n != 2 {
		t.Errorf("repair made %d blob requests, want 2 (the config resolve reads, the layer once)", n)
	}
}
