package installer

// hbx resolve: what a tag names on the registry now, pinned, and what an
// upgrade to it would fetch and reuse.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	digest "github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/docker/reference"

	"github.com/hermesbox/hbx/release"
)

// ResolveOptions is one tag resolution.
type ResolveOptions struct {
	Ref      release.ImageRef // from release.ParseTagRef: a tag, maybe a digest
	Platform Platform
	// RuntimeDir is the runtime directory whose blob store says what is
	// already on disk; "" counts nothing as stored.
	RuntimeDir string
	Registry   RegistryOptions // Mirrors are not consulted: a tag is asked of its own repository
	Logger     *slog.Logger    // nil discards
}

// Resolution is what Ref's tag names on the registry now: the pinned
// reference, the platform's manifest and the layers an install of it
// would apply, each marked with whether the blob store has it.
type Resolution struct {
	Ref      release.ImageRef // as given (Digest "" when none was)
	Index    digest.Digest    // digest of the document the tag names
	Single   bool             // the tag names a single manifest, not an index (Manifest is Index)
	Platform string
	Manifest digest.Digest // the platform's child manifest (Single: the manifest itself)
	Config   digest.Digest
	Layers   []PlannedLayer
}

// PlannedLayer is one layer of the resolved manifest: its blob, its
// compressed size (the manifest's) and diff_id, and Reusable when an
// upgrade would not download it (reusableLayers).
type PlannedLayer struct {
	Digest   digest.Digest `json:"digest"`
	DiffID   digest.Digest `json:"diff_id"`
	Size     int64         `json:"size"`
	Reusable bool          `json:"reusable"`
}

// Pinned is the reference executor.image and hbx upgrade --image take:
// name:tag@<Index>.
func (r *Resolution) Pinned() string { return r.Ref.Name + ":" + r.Ref.Tag + "@" + r.Index.String() }

// Plan sums the layers: how many an upgrade would fetch and reuse, and
// their compressed bytes.
func (r *Resolution) Plan() (fetch, reuse int, fetchBytes, reuseBytes int64) {
	for _, l := range r.Layers {
		if l.Reusable {
			reuse, reuseBytes = reuse+1, reuseBytes+l.Size
		} else {
			fetch, fetchBytes = fetch+1, fetchBytes+l.Size
		}
	}
	return fetch, reuse, fetchBytes, reuseBytes
}

// Check returns an error wrapping ErrDigestMismatch when Ref carries a
// digest and the tag names another one now (the tag moved, or the digest
// is of another image); nil otherwise.
func (r *Resolution) Check() error {
	if r.Ref.Digest != "" && r.Ref.Digest != r.Index {
		return fmt.Errorf("%w: %s:%s names %s now, not the given %s", ErrDigestMismatch, r.Ref.Name, r.Ref.Tag, r.Index, r.Ref.Digest)
	}
	return nil
}

// ResolveTag asks the registry what o.Ref's tag names now, with the
// install's registry client and options (TLS, auth file, certificates,
// retries), hashes it, picks o.Platform's manifest from an index and
// fetches its config (checked as an install checks them), and marks the
// layers whose blobs the store has. It writes nothing but a scratch
// directory under os.TempDir, removed before it returns. Errors: the
// registry's (unreachable, unknown tag: wrapped as the install wraps
// them), ErrPlatform (no manifest for the platform), ErrUnsupported.
func ResolveTag(ctx context.Context, o ResolveOptions) (*Resolution, error) {
	res, err := resolveTag(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("%s:%s: %w", o.Ref.Name, o.Ref.Tag, err)
	}
	return res, nil
}

// resolveTag is ResolveTag without the reference in its errors.
func resolveTag(ctx context.Context, o ResolveOptions) (*Resolution, error) {
	named, err := reference.ParseNormalizedNamed(o.Ref.Name + ":" + o.Ref.Tag)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadReference, err)
	}
	scratch, err := os.MkdirTemp("", "hbx-resolve-")
	if err != nil {
		return nil, fmt.Errorf("create scratch directory: %w", err)
	}
	defer os.RemoveAll(scratch)
	src, err := openTagged(ctx, named.(reference.NamedTagged), o.Registry, scratch, o.Logger)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	top, served := src.index, src.indexType
	if len(top) > maxManifestBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxManifestBytes)
	}
	r := &resolved{IndexDigest: digest.FromBytes(top), IndexBytes: top}
	mb, mt, err := pickManifest(ctx, src, r, top, mediaTypeOf(top, served), o.Platform, "")
	if err != nil {
		return nil, err
	}
	r.ManifestBytes = mb
	if err := r.parseManifest(mt); err != nil {
		return nil, err
	}
	if err := r.fetchConfig(ctx, src); err != nil {
		return nil, err
	}
	if err := r.checkConfig(o.Platform); err != nil {
		return nil, err
	}
	res := &Resolution{Ref: o.Ref, Index: r.IndexDigest, Single: r.ManifestDigest == r.IndexDigest,
		Platform: o.Platform.String(), Manifest: r.ManifestDigest, Config: r.ConfigDigest}
	for i, l := range r.Manifest.Layers {
		res.Layers = append(res.Layers, PlannedLayer{Digest: l.Digest, DiffID: r.Config.RootFS.DiffIDs[i], Size: l.Size})
	}
	reusableLayers(o.RuntimeDir, res.Layers)
	return res, nil
}

// reusableLayers marks the layers an upgrade would not download: today
// those whose blob the runtime directory's blob store holds, a regular
// file of the manifest's size (an install re-hashes it as it reads it,
// and fetches it again when it does not match). Reuse of extracted
// layers by chain ID refines this in one place.
func reusableLayers(runtimeDir string, layers []PlannedLayer) {
	if runtimeDir == "" {
		return
	}
	for i := range layers {
		d := layers[i].Digest
		fi, err := os.Lstat(filepath.Join(runtimeDir, release.BlobsDir, string(d.Algorithm()), d.Encoded()))
		layers[i].Reusable = err == nil && fi.Mode().IsRegular() && fi.Size() == layers[i].Size
	}
}
