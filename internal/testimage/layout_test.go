// SPDX-License-Identifier: Apache-2.0

package testimage_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testimage"
)

func TestBuildLayoutDeterministic(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tarballs func(testing.TB) map[string]string
	}{
		{"fake bun", fakeBunTarballs},
		{"real bun", realBunTarballs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := testimage.Options{BunTarballs: tc.tarballs(t), Version: "1.2.3"}
			var imgs []*testimage.Image
			var blobs [][]string
			for range 2 {
				dir := filepath.Join(t.TempDir(), "layout")
				start := time.Now()
				img, err := testimage.BuildLayout(dir, opts)
				if err != nil {
					t.Fatalf("BuildLayout() = %v", err)
				}
				t.Logf("built in %v: index %s, manifests %v", time.Since(start).Round(time.Millisecond), img.IndexDigest, img.Manifests)
				if img.Dir != dir {
					t.Errorf("Image.Dir = %q, want %q", img.Dir, dir)
				}
				img.Dir = ""
				imgs = append(imgs, img)
				blobs = append(blobs, listDir(t, filepath.Join(dir, "blobs", "sha256")))
			}
			if diff := cmp.Diff(imgs[0], imgs[1]); diff != "" {
				t.Errorf("second build differs (-first +second):\n%s", diff)
			}
			if diff := cmp.Diff(blobs[0], blobs[1]); diff != "" {
				t.Errorf("second build's blobs differ (-first +second):\n%s", diff)
			}
			// Layers 2 and 3 are shared: 2 Bun layers, app, delta, 2 configs, 2 manifests, the index.
			if len(blobs[0]) != 9 {
				t.Errorf("layout has %d blobs, want 9: %v", len(blobs[0]), blobs[0])
			}
		})
	}

	t.Run("options matter", func(t *testing.T) {
		tarballs := fakeBunTarballs(t)
		build := func(o testimage.Options) *testimage.Image {
			t.Helper()
			o.BunTarballs = tarballs
			img, err := testimage.BuildLayout(t.TempDir(), o)
			if err != nil {
				t.Fatalf("BuildLayout(%+v) = %v", o, err)
			}
			return img
		}
		base := build(testimage.Options{})
		for _, o := range []testimage.Options{{Version: "9.9.9"}, {StateFormat: 2}} {
			if img := build(o); img.IndexDigest == base.IndexDigest {
				t.Errorf("BuildLayout(%+v) has the default options' index digest %s", o, base.IndexDigest)
			}
		}
		one := build(testimage.Options{Platforms: []string{"linux/arm64/v8"}})
		if _, ok := one.Manifests["linux/amd64"]; ok || len(one.Manifests) != 1 {
			t.Errorf("BuildLayout(arm64 only).Manifests = %v, want linux/arm64 only", one.Manifests)
		}
		if one.Manifests["linux/arm64"] != base.Manifests["linux/arm64"] {
			t.Errorf("arm64 manifest %s alone, %s with amd64; want equal", one.Manifests["linux/arm64"], base.Manifests["linux/arm64"])
		}
	})
}

func TestBuildLayoutRejects(t *testing.T) {
	tarballs := fakeBunTarballs(t)
	for _, o := range []testimage.Options{
		{BunTarballs: tarballs, Version: "1.0\n"},
		{BunTarballs: tarballs, Platforms: []string{"linux/riscv64"}},
		{BunTarballs: tarballs, Platforms: []string{"linux/amd64", "linux/amd64"}},
		{BunTarballs: tarballs, StateFormat: -1},
		{BunTarballs: map[string]string{"linux/amd64": tarballs["linux/amd64"]}},
		{BunTarballs: map[string]string{"linux/amd64": "/nonexistent.tgz"}, Platforms: []string{"linux/amd64"}},
	} {
		if _, err := testimage.BuildLayout(t.TempDir(), o); err == nil {
			t.Errorf("BuildLayout(%+v) = nil error, want one", o)
		}
	}
}

func TestBunTarballsMissing(t *testing.T) {
	_, err := testimage.BunTarballs(t.TempDir())
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "scripts/testdeps.sh") {
		t.Errorf("BunTarballs(empty dir) = %v, want a not-exist error naming scripts/testdeps.sh", err)
	}
}

func TestLayoutShape(t *testing.T) {
	tarballs := fakeBunTarballs(t)
	dir := t.TempDir()
	img, err := testimage.BuildLayout(dir, testimage.Options{BunTarballs: tarballs, Version: "1.2.3"})
	if err != nil {
		t.Fatalf("BuildLayout() = %v", err)
	}
	var layout map[string]string
	readJSON(t, filepath.Join(dir, "oci-layout"), &layout)
	if layout["imageLayoutVersion"] != "1.0.0" {
		t.Errorf("oci-layout = %v", layout)
	}

	top, index, images := readLayout(t, dir)
	if top.MediaType != ocispec.MediaTypeImageIndex || top.Digest != img.IndexDigest {
		t.Errorf("index.json lists %s %s, want %s %s", top.MediaType, top.Digest, ocispec.MediaTypeImageIndex, img.IndexDigest)
	}
	if index.MediaType != ocispec.MediaTypeImageIndex || index.SchemaVersion != 2 {
		t.Errorf("index mediaType %q schemaVersion %d", index.MediaType, index.SchemaVersion)
	}
	var platforms []ocispec.Platform
	for _, im := range images {
		platforms = append(platforms, *im.desc.Platform)
	}
	wantPlatforms := []ocispec.Platform{
		{OS: "linux", Architecture: "amd64"},
		{OS: "linux", Architecture: "arm64", Variant: "v8"},
	}
	if diff := cmp.Diff(platforms, wantPlatforms); diff != "" {
		t.Errorf("index platforms (-got +want):\n%s", diff)
	}

	for _, im := range images {
		p := im.desc.Platform.OS + "/" + im.desc.Platform.Architecture
		t.Run(p, func(t *testing.T) {
			if img.Manifests[p] != im.desc.Digest {
				t.Errorf("Image.Manifests[%s] = %s, index has %s", p, img.Manifests[p], im.desc.Digest)
			}
			m, c := im.manifest, im.config
			if m.MediaType != ocispec.MediaTypeImageManifest || im.desc.MediaType != ocispec.MediaTypeImageManifest {
				t.Errorf("manifest media type %q, descriptor says %q", m.MediaType, im.desc.MediaType)
			}
			if m.Config.MediaType != ocispec.MediaTypeImageConfig {
				t.Errorf("config media type %q", m.Config.MediaType)
			}
			var types []string
			for _, l := range m.Layers {
				types = append(types, l.MediaType)
			}
			wantTypes := []string{ocispec.MediaTypeImageLayerGzip, ocispec.MediaTypeImageLayerGzip, ocispec.MediaTypeImageLayerZstd}
			if diff := cmp.Diff(types, wantTypes); diff != "" {
				t.Errorf("layer media types (-got +want):\n%s", diff)
			}

			var diffIDs []digest.Digest
			for _, l := range m.Layers {
				diffIDs = append(diffIDs, digest.FromBytes(uncompressed(t, dir, l)))
			}
			if diff := cmp.Diff(c.RootFS.DiffIDs, diffIDs); diff != "" {
				t.Errorf("config diff_ids vs sha256 of the uncompressed layers (-config +layers):\n%s", diff)
			}
			if c.RootFS.Type != "layers" || len(c.History) != 3 {
				t.Errorf("rootfs.type %q, %d history entries; want layers, 3", c.RootFS.Type, len(c.History))
			}
			if diff := cmp.Diff(c.Platform, *im.desc.Platform); diff != "" {
				t.Errorf("config platform vs index platform (-config +index):\n%s", diff)
			}
			wantConfig := ocispec.ImageConfig{
				WorkingDir: "/app/apps/host-selfhost",
				Entrypoint: []string{"/usr/local/bin/docker-entrypoint.sh"},
				Cmd:        []string{"bun", "run", "src/serve.ts"},
				Env: []string{
					"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
					"BUN_RUNTIME_TRANSPILER_CACHE_PATH=0",
					"BUN_INSTALL_BIN=/usr/local/bin",
					"EXECUTOR_HOST=0.0.0.0",
					"PORT=4788",
					"EXECUTOR_DATA_DIR=/data",
					"NODE_ENV=production",
				},
				Volumes:      map[string]struct{}{"/data": {}},
				ExposedPorts: map[string]struct{}{"4788/tcp": {}},
				Labels:       map[string]string{"org.opencontainers.image.version": "1.2.3"},
			}
			if diff := cmp.Diff(c.Config, wantConfig); diff != "" {
				t.Errorf("config (-got +want):\n%s", diff)
			}
			if c.Created == nil || !c.Created.Equal(testimage.Epoch) {
				t.Errorf("config created %v, want %v", c.Created, testimage.Epoch)
			}

			// Gzip headers carry no name and no time.
			for _, l := range m.Layers[:2] {
				h := readBlob(t, dir, l)[:10]
				if h[3] != 0 || !bytes.Equal(h[4:8], []byte{0, 0, 0, 0}) {
					t.Errorf("layer %s gzip header flags %#x mtime %v, want 0, 0", l.Digest, h[3], h[4:8])
				}
			}
			for i, l := range m.Layers {
				checkTarHeaders(t, uncompressed(t, dir, l), i)
			}
		})
	}
}

// checkTarHeaders checks what every entry of every layer shares: Epoch
// times, no owner names, root owner outside home/bun.
func checkTarHeaders(t *testing.T, layer []byte, n int) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(layer))
	var names []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("layer %d: %v", n+1, err)
		}
		names = append(names, hdr.Name)
		if !hdr.ModTime.Equal(testimage.Epoch) || hdr.Uname != "" || hdr.Gname != "" {
			t.Errorf("layer %d %q: mtime %v uname %q gname %q", n+1, hdr.Name, hdr.ModTime, hdr.Uname, hdr.Gname)
		}
		wantOwner := 0
		if hdr.Name == "home/bun/" {
			wantOwner = 1000
		}
		if hdr.Uid != wantOwner || hdr.Gid != wantOwner {
			t.Errorf("layer %d %q: owner %d:%d, want %d:%d", n+1, hdr.Name, hdr.Uid, hdr.Gid, wantOwner, wantOwner)
		}
	}
	if !slices.IsSorted(names) {
		t.Errorf("layer %d entries not sorted: %v", n+1, names)
	}
}

func TestAppliedTree(t *testing.T) {
	tarballs := fakeBunTarballs(t)
	dir := t.TempDir()
	if _, err := testimage.BuildLayout(dir, testimage.Options{BunTarballs: tarballs, Version: "1.2.3"}); err != nil {
		t.Fatalf("BuildLayout() = %v", err)
	}
	_, _, images := readLayout(t, dir)
	root := t.TempDir()
	applyLayers(t, dir, images[1], root) // linux/arm64

	want := []string{
		"app/ 0755",
		"app/apps/ 0755",
		"app/apps/host-selfhost/ 0755",
		"app/apps/host-selfhost/STATE_FORMAT 0644",
		"app/apps/host-selfhost/VERSION 0644",
		"app/apps/host-selfhost/package.json 0644",
		"app/apps/host-selfhost/src/ 0755",
		"app/apps/host-selfhost/src/serve.ts 0644",
		"app/node_modules/ 0755",
		"app/node_modules/.bin/ 0755",
		"app/node_modules/.bin/fake => ../fake-pkg/bin.js",
		"app/node_modules/@hbx-test/ 0755",
		"app/node_modules/@hbx-test/banner/ 0755",
		"app/node_modules/@hbx-test/banner/index.js 0644",
		"app/node_modules/@hbx-test/banner/package.json 0644",
		"app/node_modules/@hbx-test/pad/ 0755",
		"app/node_modules/@hbx-test/pad/index.js 0644",
		"app/node_modules/@hbx-test/pad/package.json 0644",
		"app/node_modules/fake-pkg/ 0755",
		"app/node_modules/fake-pkg/bin.js 0755",
		"app/node_modules/fake-pkg/index.js 0644",
		"app/node_modules/fake-pkg/package.json 0644",
		"app/node_modules/hbx-pad/ 0755",
		"app/node_modules/hbx-pad/index.js 0644",
		"app/node_modules/hbx-pad/package.json 0644",
		"app/package.json 0644",
		"bin/ 0755",
		"etc/ 0755",
		"etc/group 0644",
		"etc/hbx-test/ 0755",
		"etc/hbx-test/replaced/ 0755",
		"etc/hbx-test/replaced/c.txt 0644",
		"etc/passwd 0644",
		"home/ 0755",
		"home/bun/ 0755",
		"home/bun/app/ 0755",
		"root/ 0700",
		"run/ 0755",
		"tmp/ 1777",
		"usr/ 0755",
		"usr/local/ 0755",
		"usr/local/bin/ 0755",
		"usr/local/bin/bun 0755",
		"usr/local/bin/docker-entrypoint.sh 0755",
		"usr/local/bin/bunx => /usr/local/bin/bun",
		"var/ 0755",
		"var/run => /run",
	}
	got := tartest.Shape(t, root)
	slices.Sort(want)
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("applied tree (-got +want):\n%s", diff)
	}

	a, errA := os.Stat(filepath.Join(root, "app/node_modules/hbx-pad/index.js"))
	b, errB := os.Stat(filepath.Join(root, "app/node_modules/@hbx-test/pad/index.js"))
	if errA != nil || errB != nil || !os.SameFile(a, b) {
		t.Errorf("hbx-pad/index.js and @hbx-test/pad/index.js are not one file (%v, %v)", errA, errB)
	}
	for path, want := range map[string]string{
		"app/apps/host-selfhost/VERSION":      "1.2.3\n",
		"app/apps/host-selfhost/STATE_FORMAT": "1\n",
		"usr/local/bin/bun":                   "#!/bin/sh\necho fake bun for linux/arm64\n",
	} {
		if got, err := os.ReadFile(filepath.Join(root, path)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v, want %q", path, got, err, want)
		}
	}
}

func listDir(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
