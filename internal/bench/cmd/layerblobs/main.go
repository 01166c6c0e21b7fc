// SPDX-License-Identifier: Apache-2.0

// Command layerblobs lists the layer blobs of one platform's image in an OCI
// image layout, in manifest order, for scripts/bench.sh, which extracts them
// with tar as the floor hbx install is compared against.
//
//	layerblobs LAYOUT OS/ARCH[/VARIANT]
//
// It prints one line per layer: the layer's media type, a tab and the
// absolute path of its blob in the layout. It follows index.json through
// nested image indexes to the first manifest whose platform matches; a
// platform given without a variant matches any variant (linux/arm64 matches
// linux/arm64/v8). Each digest is validated before it names a path, and each
// listed blob must exist with its descriptor's size.
//
// It is benchmark tooling: it does not verify blob digests and trusts the
// layout otherwise.
package main

import (
	_ "crypto/sha256" // registers SHA-256 for go-digest
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/release"
)

// maxDepth bounds how many image indexes may nest below index.json.
const maxDepth = 4

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "layerblobs: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) != 2 {
		return errors.New("usage: layerblobs LAYOUT OS/ARCH[/VARIANT]")
	}
	layout, err := filepath.Abs(args[0])
	if err != nil {
		return err
	}
	want, err := parsePlatform(args[1])
	if err != nil {
		return err
	}
	var top ocispec.Index
	if err := readJSON(filepath.Join(layout, "index.json"), &top); err != nil {
		return err
	}
	desc, err := findManifest(layout, top.Manifests, want, 0)
	if err != nil {
		return err
	}
	var m ocispec.Manifest
	if err := readBlobJSON(layout, desc, &m); err != nil {
		return fmt.Errorf("read manifest %s: %w", desc.Digest, err)
	}
	var out strings.Builder
	for i, l := range m.Layers {
		p, err := blobPath(layout, l)
		if err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		fmt.Fprintf(&out, "%s\t%s\n", l.MediaType, p)
	}
	_, err = io.WriteString(stdout, out.String())
	return err
}

// parsePlatform parses os/arch[/variant] with release.ParsePlatform.
func parsePlatform(s string) (ocispec.Platform, error) {
	p, err := release.ParsePlatform(s)
	return ocispec.Platform{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant}, err
}

// matches reports whether have satisfies want; an empty wanted variant
// matches any variant.
func matches(have *ocispec.Platform, want ocispec.Platform) bool {
	return have != nil && have.OS == want.OS && have.Architecture == want.Architecture &&
		(want.Variant == "" || have.Variant == want.Variant)
}

// findManifest returns the first image manifest for want among descs,
// descending into image indexes.
func findManifest(layout string, descs []ocispec.Descriptor, want ocispec.Platform, depth int) (ocispec.Descriptor, error) {
	if depth > maxDepth {
		return ocispec.Descriptor{}, fmt.Errorf("image indexes nest deeper than %d", maxDepth)
	}
	for _, d := range descs {
		switch d.MediaType {
		case ocispec.MediaTypeImageManifest:
			if matches(d.Platform, want) {
				return d, nil
			}
		case ocispec.MediaTypeImageIndex:
			var idx ocispec.Index
			if err := readBlobJSON(layout, d, &idx); err != nil {
				return ocispec.Descriptor{}, fmt.Errorf("read index %s: %w", d.Digest, err)
			}
			m, err := findManifest(layout, idx.Manifests, want, depth+1)
			if err == nil {
				return m, nil
			}
			if !errors.Is(err, errNoManifest) {
				return ocispec.Descriptor{}, err
			}
		}
	}
	return ocispec.Descriptor{}, fmt.Errorf("platform %s: %w", platformString(want), errNoManifest)
}

var errNoManifest = errors.New("no manifest in the layout")

func platformString(p ocispec.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// blobPath returns the path of d's blob, checking that it exists with d's
// size.
func blobPath(layout string, d ocispec.Descriptor) (string, error) {
	if err := d.Digest.Validate(); err != nil {
		return "", fmt.Errorf("digest %q: %w", d.Digest, err)
	}
	if d.Digest.Algorithm() != digest.SHA256 {
		return "", fmt.Errorf("digest %s: algorithm not supported", d.Digest)
	}
	p := filepath.Join(layout, "blobs", d.Digest.Algorithm().String(), d.Digest.Encoded())
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	if st.Size() != d.Size {
		return "", fmt.Errorf("blob %s: size %d, descriptor says %d", d.Digest, st.Size(), d.Size)
	}
	return p, nil
}

func readBlobJSON(layout string, d ocispec.Descriptor, v any) error {
	p, err := blobPath(layout, d)
	if err != nil {
		return err
	}
	return readJSON(p, v)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", filepath.Base(path), err)
	}
	return nil
}
