// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// writeBlob stores b in layout's blob store and returns its descriptor.
func writeBlob(t *testing.T, layout, mediaType string, b []byte) ocispec.Descriptor {
	t.Helper()
	d := digest.FromBytes(b)
	dir := filepath.Join(layout, "blobs", "sha256")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, d.Encoded()), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
}

func writeJSONBlob(t *testing.T, layout, mediaType string, v any) ocispec.Descriptor {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return writeBlob(t, layout, mediaType, b)
}

// newLayout writes index.json -> image index -> one manifest per platform,
// each with two layers named after the platform.
func newLayout(t *testing.T) (layout string, layers map[string][]ocispec.Descriptor) {
	t.Helper()
	layout = t.TempDir()
	layers = map[string][]ocispec.Descriptor{}
	var idx ocispec.Index
	idx.SchemaVersion = 2
	idx.MediaType = ocispec.MediaTypeImageIndex
	for _, p := range []ocispec.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}} {
		name := platformString(p)
		ls := []ocispec.Descriptor{
			writeBlob(t, layout, ocispec.MediaTypeImageLayerGzip, []byte(name+" base")),
			writeBlob(t, layout, ocispec.MediaTypeImageLayerZstd, []byte(name+" top")),
		}
		layers[name] = ls
		m := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: writeBlob(t, layout, ocispec.MediaTypeImageConfig, []byte("{}")), Layers: ls}
		m.SchemaVersion = 2
		d := writeJSONBlob(t, layout, ocispec.MediaTypeImageManifest, m)
		d.Platform = &p
		idx.Manifests = append(idx.Manifests, d)
	}
	top := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{writeJSONBlob(t, layout, ocispec.MediaTypeImageIndex, idx)}}
	top.SchemaVersion = 2
	b, _ := json.Marshal(top)
	if err := os.WriteFile(filepath.Join(layout, "index.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return layout, layers
}

func want(layout string, ls []ocispec.Descriptor) string {
	var s strings.Builder
	for _, l := range ls {
		s.WriteString(l.MediaType + "\t" + filepath.Join(layout, "blobs", "sha256", l.Digest.Encoded()) + "\n")
	}
	return s.String()
}

func TestRun(t *testing.T) {
	layout, layers := newLayout(t)
	for _, c := range []struct{ platform, key string }{
		{"linux/amd64", "linux/amd64"},
		{"linux/arm64", "linux/arm64/v8"},
		{"linux/arm64/v8", "linux/arm64/v8"},
	} {
		var out strings.Builder
		if err := run([]string{layout, c.platform}, &out); err != nil {
			t.Fatalf("run(%s) = %v", c.platform, err)
		}
		if diff := cmp.Diff(out.String(), want(layout, layers[c.key])); diff != "" {
			t.Errorf("run(%s) output (-got +want):\n%s", c.platform, diff)
		}
	}
}

func TestRunRefuses(t *testing.T) {
	layout, layers := newLayout(t)
	for _, c := range []struct{ platform, wantErr string }{
		{"linux/riscv64", "no manifest"},
		{"linux/arm64/v7", "no manifest"},
		{"linux", "want os/arch"},
	} {
		if err := run([]string{layout, c.platform}, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("run(%s) = %v, want an error containing %q", c.platform, err, c.wantErr)
		}
	}
	// A truncated layer blob.
	p := filepath.Join(layout, "blobs", "sha256", layers["linux/amd64"][1].Digest.Encoded())
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{layout, "linux/amd64"}, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "size 1") {
		t.Errorf("run with a truncated blob = %v, want a size error", err)
	}
}
