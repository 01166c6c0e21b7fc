// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// tarOf is a tar stream of one directory and one regular file of size bytes.
func tarOf(t *testing.T, size int) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	hdrs := []*tar.Header{{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(size)}}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tw.Write(bytes.Repeat([]byte("x"), size)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gzipOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return z.Bytes()
}

// TestCPUFloorPrintsEachLayerAndTheBound runs the tool on layers of each
// accepted kind and on the inputs it must refuse with one clear error.
func TestCPUFloorPrintsEachLayerAndTheBound(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gz := write("gz", gzipOf(t, tarOf(t, 3<<20)))
	plain := write("plain", tarOf(t, 10))
	tests := []struct {
		name, in string
		want     []string // substrings of the output, in order
		wantErr  string
	}{
		{"gzip and plain layers", ocispec.MediaTypeImageLayerGzip + "\t" + gz + "\n" + ocispec.MediaTypeImageLayer + "\t" + plain + "\n",
			[]string{"layer 0 inflate ", " mib 3\n", "layer 1 inflate ", " mib 0\n", "total inflate ", "largest ", "cpu "}, ""},
		{"no layers", "", nil, "no layers on stdin"},
		{"line without a tab", "just-a-path\n", nil, "want media type, tab, path"},
		{"zstd refused", ocispec.MediaTypeImageLayerZstd + "\t" + plain + "\n", nil, "want gzip or plain tar"},
		{"not gzip", ocispec.MediaTypeImageLayerGzip + "\t" + plain + "\n", nil, "open gzip"},
		{"missing blob", ocispec.MediaTypeImageLayerGzip + "\t" + filepath.Join(dir, "absent") + "\n", nil, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			err := run(strings.NewReader(tt.in), &out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("run: %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rest := out.String()
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("output lacks %q after the earlier parts:\n%s", w, out.String())
				}
				rest = rest[i+len(w):]
			}
		})
	}
}
