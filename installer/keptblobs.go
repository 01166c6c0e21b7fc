package installer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/docker/reference"

	"github.com/hermesbox/hbx/internal/units"
	"github.com/hermesbox/hbx/release"
)

// verifyKept is Verify's check of the blob store once the active release
// cur passed its own: every stored blob is re-hashed and those that no
// longer match are removed (checkKeptBlobs); then, with KeepBlobs, the
// blobs of cur that are missing (removed just now, or never kept: an
// install made with install.keep_blobs off) are fetched again from the
// registry (or Options.From, without network), checked against the
// release's digests, without staging the release again. The result is a
// warm one (Changed false) that counts the layer blobs fetched.
func verifyKept(ctx context.Context, opts Options, ref reference.Canonical, plat Platform, cur *release.Installed, log *slog.Logger) (*Result, error) {
	res := &Result{Reason: "active release matches", Release: cur}
	damaged, err := checkKeptBlobs(opts.RuntimeDir, cur, log)
	if err != nil || !opts.KeepBlobs {
		return res, err
	}
	cache := blobCache{dir: filepath.Join(opts.RuntimeDir, release.BlobsDir)}
	m := cur.Meta
	missing := 0
	seen := map[digest.Digest]bool{} // a blob named twice (index and manifest of a single manifest, a repeated layer) is one
	for _, d := range append([]digest.Digest{m.IndexDigest, m.ManifestDigest, m.ConfigDigest}, m.Layers...) {
		if d.Validate() == nil && !seen[d] && !cache.has(d, 0) {
			missing++
		}
		seen[d] = true
	}
	if missing == 0 {
		return res, nil
	}
	log.Info("fetching the active release's missing kept blobs", "missing", missing, "damaged", damaged)
	ictx, dl, stop := withDeadline(ctx, opts.Timeout, opts.MinRate)
	defer stop()
	err = fetchKept(ictx, opts, ref, plat, cur, cache, dl, log, res)
	os.RemoveAll(filepath.Join(opts.RuntimeDir, release.ScratchDir)) // the registry source's scratch
	if err != nil {
		return nil, fmt.Errorf("fetch the active release's kept blobs: %w", err)
	}
	res.Refetched = missing
	res.Reason = "active release matches; fetched " + units.Count(missing, "missing or damaged kept blob", "missing or damaged kept blobs")
	return res, nil
}

// fetchKept resolves the image from the registry or Options.From (index
// and platform manifest by their pinned digests, as an install does),
// checks that it names the blobs cur records, and stores those the store
// lacks: the index, manifest and config bytes, and each missing layer
// (size and digest checked, renamed into place only then). res counts
// the layers.
func fetchKept(ctx context.Context, opts Options, ref reference.Canonical, plat Platform, cur *release.Installed, cache blobCache, dl *deadline, log *slog.Logger, res *Result) (err error) {
	src, err := openImage(ctx, opts, ref, log)
	if err != nil {
		return err
	}
	defer src.Close()
	if rm, ok := src.(*remote); ok {
		res.Location = rm.location
	}
	defer func() {
		// Every error names the local image once (openLocal's do), as a cold install's.
		if l, ok := src.(*localSource); ok && err != nil {
			err = fmt.Errorf("%s: %w", l.name, err)
		}
	}()
	r, err := resolve(ctx, src, ref.Digest(), plat, opts.PlatformDigest)
	if err != nil {
		return err
	}
	m := cur.Meta
	var layers []digest.Digest
	var missing []v1.Descriptor
	var size int64
	for _, l := range r.Manifest.Layers {
		layers = append(layers, l.Digest)
		if !cache.has(l.Digest, l.Size) && !slices.ContainsFunc(missing, func(x v1.Descriptor) bool { return x.Digest == l.Digest }) {
			missing = append(missing, l)
			size += l.Size
		}
	}
	if r.ManifestDigest != m.ManifestDigest || r.ConfigDigest != m.ConfigDigest || !slices.Equal(layers, m.Layers) {
		return fmt.Errorf("%w: the image's manifest %s names other blobs than the active release %s records", ErrDigestMismatch, r.ManifestDigest, m.ManifestDigest)
	}
	for _, b := range []struct {
		d digest.Digest
		b []byte
	}{{r.IndexDigest, r.IndexBytes}, {r.ManifestDigest, r.ManifestBytes}, {r.ConfigDigest, r.ConfigBytes}} {
		if err := cache.put(b.d, b.b); err != nil {
			return err
		}
	}
	dl.scale(size)
	for _, l := range missing {
		start := time.Now()
		fd := newFeed()
		err := cache.fetch(ctx, src, l, fd)
		fd.close()
		if err != nil {
			return fmt.Errorf("fetch layer %s from %s: %w", l.Digest, registryHost(src), err)
		}
		res.Fetched++
		res.FetchedBytes += l.Size
		log.Info("kept blob fetched", "digest", l.Digest, "size", l.Size, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}
