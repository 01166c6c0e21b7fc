package ociarchive

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// maxDocumentBytes caps the top document and the manifest read into memory.
const maxDocumentBytes = 4 << 20

// StoredImage describes the image of one platform that s holds: top
// (the index, manifest list or single manifest the image's digest names,
// its media type as the document states it, else OCI's by its shape),
// the child manifest (the top document itself for a single manifest,
// else one the top index lists), its config and its layers, with their
// sizes and media types from the manifest. tag becomes the archive's
// ref.name. The top document and the manifest are read and checked
// against their digests here; the other blobs are checked when written.
func StoredImage(s Store, tag string, top, manifest digest.Digest) (Image, error) {
	topBytes, err := readDocument(s, top)
	if err != nil {
		return Image{}, err
	}
	img := Image{Tag: tag, Top: v1.Descriptor{MediaType: mediaTypeOf(topBytes), Digest: top, Size: int64(len(topBytes))}}
	mb := topBytes
	if manifest != top {
		var idx v1.Index
		if err := json.Unmarshal(topBytes, &idx); err != nil {
			return Image{}, fmt.Errorf("parse index %s: %w", top, err)
		}
		if !slices.ContainsFunc(idx.Manifests, func(d v1.Descriptor) bool { return d.Digest == manifest }) {
			return Image{}, fmt.Errorf("index %s does not list manifest %s", top, manifest)
		}
		if mb, err = readDocument(s, manifest); err != nil {
			return Image{}, err
		}
	}
	var m v1.Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return Image{}, fmt.Errorf("parse manifest %s: %w", manifest, err)
	}
	img.Blobs = append(img.Blobs, img.Top)
	if manifest != top {
		img.Blobs = append(img.Blobs, v1.Descriptor{MediaType: mediaTypeOf(mb), Digest: manifest, Size: int64(len(mb))})
	}
	img.Blobs = append(img.Blobs, m.Config)
	img.Blobs = append(img.Blobs, m.Layers...)
	for _, b := range img.Blobs[1:] {
		if err := b.Digest.Validate(); err != nil {
			return Image{}, fmt.Errorf("manifest %s: blob digest %q: %w", manifest, b.Digest, err)
		}
	}
	return img, nil
}

// readDocument reads the blob d (at most maxDocumentBytes) and checks it
// hashes to d.
func readDocument(s Store, d digest.Digest) ([]byte, error) {
	rc, size, err := s.Open(d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if size > maxDocumentBytes {
		return nil, fmt.Errorf("stored blob %s: %d bytes, more than %d for an index or manifest", d, size, maxDocumentBytes)
	}
	b, err := io.ReadAll(io.LimitReader(rc, maxDocumentBytes))
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", d, err)
	}
	if d.Algorithm().FromBytes(b) != d {
		return nil, fmt.Errorf("stored blob %s: %w: content does not hash to its name", d, ErrDigestMismatch)
	}
	return b, nil
}

// mediaTypeOf is the document's own mediaType, else OCI's index or
// manifest type by its shape.
func mediaTypeOf(b []byte) string {
	var probe struct {
		MediaType string          `json:"mediaType"`
		Manifests json.RawMessage `json:"manifests"`
	}
	_ = json.Unmarshal(b, &probe)
	switch {
	case probe.MediaType != "":
		return probe.MediaType
	case probe.Manifests != nil:
		return v1.MediaTypeImageIndex
	}
	return v1.MediaTypeImageManifest
}
