// SPDX-License-Identifier: Apache-2.0

package testimage_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
)

// fakeBunTarballs writes npm-shaped tarballs whose package/bin/bun is a small
// script naming its platform, and returns them keyed by platform.
func fakeBunTarballs(t testing.TB) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out := map[string]string{}
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		for _, f := range []struct {
			name string
			mode int64
			data string
		}{
			{"package/package.json", 0o644, `{"name":"fake-bun"}`},
			{"package/bin/bun", 0o755, "#!/bin/sh\necho fake bun for " + p + "\n"},
		} {
			if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write([]byte(f.data)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, strings.ReplaceAll(p, "/", "-")+".tgz")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		out[p] = path
	}
	return out
}

// realBunTarballs returns the tarballs scripts/testdeps.sh fetches, or
// reports them with testenv.Unavailable.
func realBunTarballs(t testing.TB) map[string]string {
	t.Helper()
	tarballs, err := testimage.BunTarballs(testenv.RepoRoot(t))
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	return tarballs
}

// hostPlatform is the image platform this machine runs natively.
func hostPlatform(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		// Not a missing prerequisite: the test image has no child for this host.
		t.Skipf("no test image platform for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	return "linux/" + runtime.GOARCH
}

// layoutImage is one platform's image read back from a layout.
type layoutImage struct {
	desc     ocispec.Descriptor // from the index, with its platform
	manifest ocispec.Manifest
	config   ocispec.Image
}

// readLayout reads the layout's single image index and its images,
// verifying the digest and size of every blob it reads.
func readLayout(t testing.TB, dir string) (ocispec.Descriptor, ocispec.Index, []layoutImage) {
	t.Helper()
	var top ocispec.Index
	readJSON(t, filepath.Join(dir, "index.json"), &top)
	if len(top.Manifests) != 1 {
		t.Fatalf("index.json lists %d descriptors, want 1", len(top.Manifests))
	}
	desc := top.Manifests[0]
	var index ocispec.Index
	decodeBlob(t, dir, desc, &index)
	var images []layoutImage
	for _, d := range index.Manifests {
		var img layoutImage
		img.desc = d
		decodeBlob(t, dir, d, &img.manifest)
		decodeBlob(t, dir, img.manifest.Config, &img.config)
		images = append(images, img)
	}
	return desc, index, images
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
}

// readBlob returns a blob's bytes after checking them against desc.
func readBlob(t testing.TB, dir string, desc ocispec.Descriptor) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "blobs", desc.Digest.Algorithm().String(), desc.Digest.Encoded()))
	if err != nil {
		t.Fatal(err)
	}
	if got := digest.FromBytes(data); got != desc.Digest {
		t.Fatalf("blob %s has digest %s", desc.Digest, got)
	}
	if int64(len(data)) != desc.Size {
		t.Fatalf("blob %s has size %d, descriptor says %d", desc.Digest, len(data), desc.Size)
	}
	return data
}

func decodeBlob(t testing.TB, dir string, desc ocispec.Descriptor, v any) {
	t.Helper()
	if err := json.Unmarshal(readBlob(t, dir, desc), v); err != nil {
		t.Fatalf("parse blob %s: %v", desc.Digest, err)
	}
}

// uncompressed returns a layer's tar stream.
func uncompressed(t testing.TB, dir string, desc ocispec.Descriptor) []byte {
	t.Helper()
	blob := readBlob(t, dir, desc)
	var r io.Reader
	switch desc.MediaType {
	case ocispec.MediaTypeImageLayerGzip:
		zr, err := gzip.NewReader(bytes.NewReader(blob))
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case ocispec.MediaTypeImageLayerZstd:
		zr, err := zstd.NewReader(bytes.NewReader(blob))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	default:
		t.Fatalf("layer %s: media type %s", desc.Digest, desc.MediaType)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decompress layer %s: %v", desc.Digest, err)
	}
	return data
}

// applyLayers unpacks the image's layers in order into root, honouring
// whiteouts. It trusts the archives (they are ours): it refuses non-local
// names but does not guard against writes through symlinks, and ignores
// ownership.
func applyLayers(t testing.TB, dir string, img layoutImage, root string) {
	t.Helper()
	for _, l := range img.manifest.Layers {
		if err := applyLayer(root, uncompressed(t, dir, l)); err != nil {
			t.Fatalf("apply layer %s: %v", l.Digest, err)
		}
	}
}

func applyLayer(root string, layer []byte) error {
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if !filepath.IsLocal(name) {
			return fmt.Errorf("entry %q: not local", hdr.Name)
		}
		target := filepath.Join(root, name)
		base := path.Base(name)
		switch {
		case base == ".wh..wh..opq":
			parent := filepath.Dir(target)
			children, err := os.ReadDir(parent)
			if err != nil {
				return err
			}
			for _, c := range children {
				if err := os.RemoveAll(filepath.Join(parent, c.Name())); err != nil {
					return err
				}
			}
			continue
		case strings.HasPrefix(base, ".wh."):
			if err := os.RemoveAll(filepath.Join(filepath.Dir(target), strings.TrimPrefix(base, ".wh."))); err != nil {
				return err
			}
			continue
		}
		mode := hdr.FileInfo().Mode()
		if hdr.Typeflag != tar.TypeDir {
			if err := os.RemoveAll(target); err != nil {
				return err
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return err
			}
			if err := os.Chmod(target, mode.Perm()|mode&(fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid)); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := os.Chmod(target, mode.Perm()); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			if !filepath.IsLocal(hdr.Linkname) {
				return fmt.Errorf("entry %q: link target %q not local", hdr.Name, hdr.Linkname)
			}
			if err := os.Link(filepath.Join(root, hdr.Linkname), target); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: type %q", hdr.Name, hdr.Typeflag)
		}
	}
}
