package installer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/types"

	"github.com/hermesbox/hbx/release"
)

// Errors of the resolve step. Use errors.Is.
var (
	// ErrDigestMismatch: bytes fetched do not hash to the digest that named them.
	ErrDigestMismatch = errors.New("digest mismatch")
	// ErrPlatform: no manifest for the platform, or a config that disagrees.
	ErrPlatform = errors.New("platform mismatch")
	// ErrUnsupported: a manifest, index or layer media type hbx does not install.
	ErrUnsupported = errors.New("unsupported media type")
)

// Size caps for documents read into memory.
const (
	maxManifestBytes = 4 << 20
	maxConfigBytes   = 8 << 20
)

// Platform is os/arch[/variant] as image-spec image-index.md "platform".
type Platform release.Platform

// ParsePlatform parses "os/arch[/variant]" with release.ParsePlatform.
func ParsePlatform(s string) (Platform, error) {
	p, err := release.ParsePlatform(s)
	return Platform(p), err
}

// String returns "os/arch" or "os/arch/variant".
func (p Platform) String() string { return release.Platform(p).String() }

// Same reports whether p and q name one platform: os and architecture
// equal, and the variant equal once arm64's default v8 counts as none.
func (p Platform) Same(q Platform) bool {
	return p.OS == q.OS && p.Architecture == q.Architecture &&
		normVariant(p.Architecture, p.Variant) == normVariant(q.Architecture, q.Variant)
}

// normVariant treats arm64's default variant v8 as no variant.
func normVariant(arch, v string) string {
	if arch == "arm64" && v == "v8" {
		return ""
	}
	return v
}

// matches reports whether an index entry's platform satisfies p: os and
// architecture equal; the variant equal when p names one.
func (p Platform) matches(q *v1.Platform) bool {
	if q == nil || q.OS != p.OS || q.Architecture != p.Architecture {
		return false
	}
	return p.Variant == "" || normVariant(p.Architecture, p.Variant) == normVariant(q.Architecture, q.Variant)
}

// resolved is what the resolve step learned about the image.
type resolved struct {
	IndexDigest    digest.Digest
	IndexBytes     []byte // the top document as fetched; hashes to IndexDigest
	ManifestDigest digest.Digest
	ManifestBytes  []byte // as fetched; hashes to ManifestDigest
	Manifest       v1.Manifest
	ConfigDigest   digest.Digest
	ConfigBytes    []byte
	Config         v1.Image
}

func readAllCapped(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return b, nil
}

func checkDigest(what string, b []byte, want digest.Digest) error {
	if got := want.Algorithm().FromBytes(b); got != want {
		return fmt.Errorf("%s: %w: got %s, want %s", what, ErrDigestMismatch, got, want)
	}
	return nil
}

func isSchema1(mt string) bool {
	return mt == manifest.DockerV2Schema1MediaType || mt == manifest.DockerV2Schema1SignedMediaType
}

// mediaTypeOf trusts the document's own mediaType field, then the
// registry's Content-Type, then a guess from the JSON shape.
func mediaTypeOf(b []byte, served string) string {
	var probe struct {
		MediaType     string          `json:"mediaType"`
		SchemaVersion int             `json:"schemaVersion"`
		Manifests     json.RawMessage `json:"manifests"`
	}
	if json.Unmarshal(b, &probe) == nil {
		if probe.MediaType != "" {
			return probe.MediaType
		}
		if probe.SchemaVersion == 1 {
			return manifest.DockerV2Schema1MediaType
		}
		if probe.Manifests != nil {
			return v1.MediaTypeImageIndex
		}
	}
	if served != "" {
		return manifest.NormalizedMIMEType(served)
	}
	return manifest.GuessMIMEType(b)
}

// resolve fetches the index named by the pinned digest (or a single
// manifest), picks the child for plat, checks its pin, and fetches and
// checks the config. Steps: fetchTop (the index, by its digest),
// pickManifest (the child for plat, fetched and checked against its pin),
// parseManifest (schema 2, layers we can apply), fetchConfig (by its
// digest), checkConfig (platform and diff_ids).
func resolve(ctx context.Context, src types.ImageSource, indexDigest digest.Digest, plat Platform, pin digest.Digest) (*resolved, error) {
	top, mt, err := fetchTop(ctx, src, indexDigest)
	if err != nil {
		return nil, err
	}
	r := &resolved{IndexDigest: indexDigest, IndexBytes: top}
	if r.ManifestBytes, mt, err = pickManifest(ctx, src, r, top, mt, plat, pin); err != nil {
		return nil, err
	}
	if err := r.parseManifest(mt); err != nil {
		return nil, err
	}
	if err := r.fetchConfig(ctx, src); err != nil {
		return nil, err
	}
	if err := r.checkConfig(plat); err != nil {
		return nil, err
	}
	return r, nil
}

// fetchTop fetches what the image's digest names (an index, or a single
// manifest) and checks its size and digest; mt is its media type.
func fetchTop(ctx context.Context, src types.ImageSource, indexDigest digest.Digest) (top []byte, mt string, err error) {
	top, served, err := src.GetManifest(ctx, nil)
	if err != nil {
		return nil, "", fmt.Errorf("fetch index %s: %w", indexDigest, err)
	}
	if len(top) > maxManifestBytes {
		return nil, "", fmt.Errorf("index %s: larger than %d bytes", indexDigest, maxManifestBytes)
	}
	if err := checkDigest("index", top, indexDigest); err != nil {
		return nil, "", err
	}
	return top, mediaTypeOf(top, served), nil
}

// pickManifest sets r.ManifestDigest and returns the manifest's bytes and
// media type: from an index, the child for plat, checked against pin and
// fetched by its digest; a single manifest is the top document itself
// (pin, when set, must be its digest).
func pickManifest(ctx context.Context, src types.ImageSource, r *resolved, top []byte, mt string, plat Platform, pin digest.Digest) ([]byte, string, error) {
	indexDigest := r.IndexDigest
	switch {
	case mt == v1.MediaTypeImageIndex || mt == manifest.DockerV2ListMediaType:
		child, err := childFor(top, indexDigest, plat, pin)
		if err != nil {
			return nil, "", err
		}
		r.ManifestDigest = child
		b, served, err := src.GetManifest(ctx, &child)
		if err != nil {
			return nil, "", fmt.Errorf("fetch manifest %s from %s: %w", child, registryHost(src), err)
		}
		if len(b) > maxManifestBytes {
			return nil, "", fmt.Errorf("manifest %s: larger than %d bytes", child, maxManifestBytes)
		}
		if err := checkDigest("manifest", b, child); err != nil {
			return nil, "", err
		}
		return b, mediaTypeOf(b, served), nil
	case isSchema1(mt):
		return nil, "", fmt.Errorf("image %s: %w: Docker schema 1 manifests are not supported", indexDigest, ErrUnsupported)
	}
	// A single-platform image named directly by its manifest digest.
	if pin != "" && pin != indexDigest {
		return nil, "", fmt.Errorf("image %s is a single manifest: %w: pinned %s manifest %s", indexDigest, ErrDigestMismatch, plat, pin)
	}
	r.ManifestDigest = indexDigest
	return top, mt, nil
}

// attestationRef is the annotation buildx gives the attestation manifests
// (provenance, SBOM) it lists in an index beside the platform children,
// with the value attestationManifest and the platform unknown/unknown.
const (
	attestationRef      = "vnd.docker.reference.type"
	attestationManifest = "attestation-manifest"
)

// isAttestation reports whether d is an attestation entry of an index:
// annotated as one, or of the platform unknown/unknown. It is never an
// image to install, whatever else it claims.
func isAttestation(d *v1.Descriptor) bool {
	if d.Annotations[attestationRef] == attestationManifest {
		return true
	}
	return d.Platform != nil && d.Platform.OS == "unknown" && d.Platform.Architecture == "unknown"
}

// childFor parses the index and returns the digest of its first manifest
// for plat, checked against pin when set. Attestation entries
// (isAttestation) are never picked nor listed as platforms it has.
func childFor(top []byte, indexDigest digest.Digest, plat Platform, pin digest.Digest) (digest.Digest, error) {
	var idx v1.Index
	if err := json.Unmarshal(top, &idx); err != nil {
		return "", fmt.Errorf("parse index %s: %w", indexDigest, err)
	}
	var child *v1.Descriptor
	var have []string
	for i := range idx.Manifests {
		d := &idx.Manifests[i]
		if isAttestation(d) {
			continue
		}
		if d.Platform != nil {
			have = append(have, Platform{d.Platform.OS, d.Platform.Architecture, d.Platform.Variant}.String())
		}
		if child == nil && plat.matches(d.Platform) {
			child = d
		}
	}
	if child == nil {
		return "", fmt.Errorf("index %s: %w: no manifest for %s (has %s)", indexDigest, ErrPlatform, plat, strings.Join(have, ", "))
	}
	if err := child.Digest.Validate(); err != nil {
		return "", fmt.Errorf("index %s: manifest digest %q: %w", indexDigest, child.Digest, err)
	}
	if pin != "" && child.Digest != pin {
		return "", fmt.Errorf("index %s: %s manifest: %w: index names %s, pinned %s", indexDigest, plat, ErrDigestMismatch, child.Digest, pin)
	}
	return child.Digest, nil
}

// parseManifest parses r.ManifestBytes (media type mt): an OCI or Docker
// schema 2 image manifest whose layers are valid digests, of a
// compression we apply, without foreign URLs.
func (r *resolved) parseManifest(mt string) error {
	switch {
	case mt == v1.MediaTypeImageManifest || mt == manifest.DockerV2Schema2MediaType:
	case isSchema1(mt):
		return fmt.Errorf("manifest %s: %w: Docker schema 1 manifests are not supported", r.ManifestDigest, ErrUnsupported)
	default:
		return fmt.Errorf("manifest %s: %w %q", r.ManifestDigest, ErrUnsupported, mt)
	}
	if err := json.Unmarshal(r.ManifestBytes, &r.Manifest); err != nil {
		return fmt.Errorf("parse manifest %s: %w", r.ManifestDigest, err)
	}
	if r.Manifest.SchemaVersion != 2 {
		return fmt.Errorf("manifest %s: schemaVersion %d, want 2", r.ManifestDigest, r.Manifest.SchemaVersion)
	}
	r.Manifest.Versioned = specs.Versioned{SchemaVersion: 2}
	for i, l := range r.Manifest.Layers {
		if err := l.Digest.Validate(); err != nil {
			return fmt.Errorf("manifest %s: layer %d digest %q: %w", r.ManifestDigest, i, l.Digest, err)
		}
		if _, err := layerCompression(l.MediaType); err != nil {
			return fmt.Errorf("manifest %s: layer %s: %w", r.ManifestDigest, l.Digest, err)
		}
		if len(l.URLs) > 0 {
			return fmt.Errorf("manifest %s: layer %s: %w: foreign layer with URLs", r.ManifestDigest, l.Digest, ErrUnsupported)
		}
	}
	return nil
}

// fetchConfig fetches the manifest's config blob (at most maxConfigBytes),
// checks its digest and parses it.
func (r *resolved) fetchConfig(ctx context.Context, src types.ImageSource) error {
	cd := r.Manifest.Config.Digest
	if err := cd.Validate(); err != nil {
		return fmt.Errorf("manifest %s: config digest %q: %w", r.ManifestDigest, cd, err)
	}
	if r.Manifest.Config.Size > maxConfigBytes {
		return fmt.Errorf("config %s: %d bytes, more than %d", cd, r.Manifest.Config.Size, maxConfigBytes)
	}
	rc, _, err := src.GetBlob(ctx, types.BlobInfo{Digest: cd, Size: r.Manifest.Config.Size}, none.NoCache)
	if err != nil {
		return fmt.Errorf("fetch config %s from %s: %w", cd, registryHost(src), err)
	}
	cb, err := readAllCapped(rc, maxConfigBytes)
	rc.Close()
	if err != nil {
		return fmt.Errorf("fetch config %s from %s: %w", cd, registryHost(src), err)
	}
	if err := checkDigest("config", cb, cd); err != nil {
		return err
	}
	r.ConfigDigest, r.ConfigBytes = cd, cb
	if err := json.Unmarshal(cb, &r.Config); err != nil {
		return fmt.Errorf("parse config %s: %w", cd, err)
	}
	return nil
}

// checkConfig checks the config's platform against plat and that it has
// one valid diff_id per layer.
func (r *resolved) checkConfig(plat Platform) error {
	cd := r.ConfigDigest
	got := Platform{r.Config.OS, r.Config.Architecture, r.Config.Variant}
	if got.OS != plat.OS || got.Architecture != plat.Architecture ||
		(plat.Variant != "" && got.Variant != "" && normVariant(got.Architecture, got.Variant) != normVariant(plat.Architecture, plat.Variant)) {
		return fmt.Errorf("config %s: %w: image is %s, want %s", cd, ErrPlatform, got, plat)
	}
	if n, m := len(r.Config.RootFS.DiffIDs), len(r.Manifest.Layers); n != m {
		return fmt.Errorf("config %s: %d diff_ids for %d layers", cd, n, m)
	}
	for i, d := range r.Config.RootFS.DiffIDs {
		if err := d.Validate(); err != nil {
			return fmt.Errorf("config %s: diff_id %d %q: %w", cd, i, d, err)
		}
	}
	return nil
}
