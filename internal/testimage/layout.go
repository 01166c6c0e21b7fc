// SPDX-License-Identifier: Apache-2.0

package testimage

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// DefaultVersion is the release string of an image built with an empty
// [Options.Version].
const DefaultVersion = "1.0.0"

// Fixed compression levels: changing one changes every compressed digest.
const (
	gzipLevel = gzip.BestSpeed
	zstdLevel = zstd.SpeedDefault
)

// Env is the image config's environment, in order, as in the pinned image
// (oven/bun's PATH, BUN_RUNTIME_TRANSPILER_CACHE_PATH and BUN_INSTALL_BIN,
// then Executor's own variables).
var Env = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"BUN_RUNTIME_TRANSPILER_CACHE_PATH=0",
	"BUN_INSTALL_BIN=/usr/local/bin",
	"EXECUTOR_HOST=0.0.0.0",
	"PORT=4788",
	"EXECUTOR_DATA_DIR=/data",
	"NODE_ENV=production",
}

// Entrypoint is the image config's entrypoint, inherited from oven/bun.
var Entrypoint = []string{"/usr/local/bin/docker-entrypoint.sh"}

// Cmd is the image config's command, run in [AppDir].
var Cmd = []string{"bun", "run", "src/serve.ts"}

// WrapperCmd is the command of the [ShapeWrapper] image (no Entrypoint).
var WrapperCmd = []string{"executor-web"}

// DistrolessCmd is the command of the [ShapeDistroless] image (no
// Entrypoint), run in [AppDir].
var DistrolessCmd = []string{"bun", "run", "dist-server/serve.js"}

// Options say what [BuildLayout] builds.
type Options struct {
	// BunTarballs maps each platform ("linux/amd64", "linux/arm64") to the
	// path of its Bun npm tarball (see [BunTarballs]).
	BunTarballs map[string]string
	// Version is the release string written to
	// app/apps/host-selfhost/VERSION, recorded by the server in its state
	// file and shown by its setup page; one line of printable characters.
	// Empty means [DefaultVersion].
	Version string
	// StateFormat is the data format the server writes to state.json; a
	// server refuses to start on data with a higher format, like a runtime
	// after a database migration it does not know. Zero means 1.
	StateFormat int
	// Platforms lists the images of the index, in any order: a subset of
	// "linux/amd64" and "linux/arm64" ("linux/arm64/v8" is accepted).
	// Empty means both.
	Platforms []string
	// ExtraEnv is appended to the image config's Env, KEY=VALUE each: a
	// test-only switch of the server (HBXTEST_FAIL_HEALTH=1) baked into
	// one image version.
	ExtraEnv []string
	// Shape is the kind of image upstream ships that the test image
	// imitates: "" (ShapeDebian), ShapeWrapper, ShapeDistroless or
	// ShapeTree.
	Shape string
	// ExtraArgs is appended to the image config's Cmd: arguments of the
	// server, such as "--pid", "/run/x.pid".
	ExtraArgs []string
}

// Image shapes ([Options.Shape]).
const (
	// ShapeDebian is oven/bun:1 (Debian) running `bun run src/serve.ts`
	// through docker-entrypoint.sh, as Executor v1.5.12 to v1.5.16.
	ShapeDebian = ""
	// ShapeWrapper is the Debian shape whose entry program is a wrapper
	// script: Entrypoint empty, Cmd ["executor-web"], a #!/bin/sh script
	// on the image's PATH that starts the server whatever its arguments
	// (`executor-web --version` starts it too and never finishes).
	ShapeWrapper = "wrapper"
	// ShapeDistroless is gcr.io/distroless/cc-debian12 as from Executor
	// v1.5.17: no shell anywhere in the rootfs (no /bin, no shell script,
	// no docker-entrypoint.sh), Entrypoint empty, Cmd ["bun", "run",
	// "dist-server/serve.js"].
	ShapeDistroless = "distroless"
	// ShapeTree is today's Executor (v1.5.30 on): the distroless shape
	// whose server is a process tree, a `workerd` child that ignores
	// SIGTERM and listens on a loopback ephemeral port, and a loopback
	// tool bridge of the server itself, with the tools execute (run
	// through the child), skills and resume (serve.ts's HBXTEST_TREE and
	// HBXTEST_SKILLS, set by its dist-server/serve.js).
	ShapeTree = "tree"
)

// Image describes a layout written by [BuildLayout].
type Image struct {
	// Dir is the OCI image layout directory.
	Dir string
	// IndexDigest is the digest of the image index, the only entry of Dir's
	// index.json.
	IndexDigest digest.Digest
	// Manifests maps each platform ("linux/amd64", "linux/arm64") to the
	// digest of its image manifest.
	Manifests map[string]digest.Digest
}

// platformSpec is a platform the test image can hold.
type platformSpec struct {
	name     string
	platform ocispec.Platform
}

// knownPlatforms lists the platforms in index order.
var knownPlatforms = []platformSpec{
	{"linux/amd64", ocispec.Platform{OS: "linux", Architecture: "amd64"}},
	{"linux/arm64", ocispec.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}},
}

// BuildLayout writes the test image into the OCI image layout dir, creating
// it if needed, and returns its digests. Reusing dir replaces its index.json
// (written last, by rename) and keeps blobs of earlier builds. Building both
// platforms reads and compresses two ~90 MiB Bun executables; it takes a few
// seconds.
func BuildLayout(dir string, opts Options) (*Image, error) {
	if err := opts.normalize(); err != nil {
		return nil, fmt.Errorf("build test image: %w", err)
	}
	img, err := build(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("build test image in %s: %w", dir, err)
	}
	return img, nil
}

func (o *Options) normalize() error {
	if o.Version == "" {
		o.Version = DefaultVersion
	}
	if strings.ContainsFunc(o.Version, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return fmt.Errorf("version %q: not one line of printable characters", o.Version)
	}
	if o.StateFormat == 0 {
		o.StateFormat = 1
	}
	if o.Shape != ShapeDebian && o.Shape != ShapeWrapper && o.Shape != ShapeDistroless && o.Shape != ShapeTree {
		return fmt.Errorf("shape %q: not %q, %q, %q or %q", o.Shape, ShapeDebian, ShapeWrapper, ShapeDistroless, ShapeTree)
	}
	if o.StateFormat < 0 {
		return fmt.Errorf("state format %d: negative", o.StateFormat)
	}
	if len(o.Platforms) == 0 {
		o.Platforms = []string{"linux/amd64", "linux/arm64"}
	}
	var plats []string
	for _, p := range o.Platforms {
		if p == "linux/arm64/v8" {
			p = "linux/arm64"
		}
		if !slices.ContainsFunc(knownPlatforms, func(k platformSpec) bool { return k.name == p }) {
			return fmt.Errorf("platform %q: not linux/amd64 or linux/arm64", p)
		}
		if slices.Contains(plats, p) {
			return fmt.Errorf("platform %q: listed twice", p)
		}
		if o.BunTarballs[p] == "" {
			return fmt.Errorf("platform %s: no bun tarball", p)
		}
		plats = append(plats, p)
	}
	o.Platforms = plats
	return nil
}

// layer is a written layer blob.
type layer struct {
	desc   ocispec.Descriptor
	diffID digest.Digest
}

func build(dir string, opts Options) (*Image, error) {
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, fmt.Errorf("create blob directory: %w", err)
	}
	if err := writeFile(filepath.Join(dir, ocispec.ImageLayoutFile), []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return nil, err
	}

	// Compress the layers concurrently; the two Bun layers dominate.
	var (
		wg                sync.WaitGroup
		app, delta        layer
		appErr, deltaErr  error
		bases             = make([]layer, len(opts.Platforms))
		baseErrs          = make([]error, len(opts.Platforms))
		gzipMT, zstdMT    = ocispec.MediaTypeImageLayerGzip, ocispec.MediaTypeImageLayerZstd
		version, stateFmt = opts.Version, opts.StateFormat
	)
	wg.Go(func() { app, appErr = writeLayer(blobs, appEntries(), gzipMT) })
	wg.Go(func() { delta, deltaErr = writeLayer(blobs, deltaEntries(version, stateFmt, opts.Shape), zstdMT) })
	for i, p := range opts.Platforms {
		tgz := opts.BunTarballs[p]
		wg.Go(func() {
			bases[i], baseErrs[i] = writeLayer(blobs, baseEntries(func() (io.ReadCloser, int64, error) { return openBun(tgz) }, opts.Shape), gzipMT)
			if baseErrs[i] != nil {
				baseErrs[i] = fmt.Errorf("%s: %w", p, baseErrs[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(append([]error{appErr, deltaErr}, baseErrs...)...); err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}

	img := &Image{Dir: dir, Manifests: map[string]digest.Digest{}}
	index := ocispec.Index{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   ocispec.MediaTypeImageIndex,
		Manifests:   []ocispec.Descriptor{},
		Annotations: map[string]string{ocispec.AnnotationVersion: opts.Version},
	}
	for _, k := range knownPlatforms {
		i := slices.Index(opts.Platforms, k.name)
		if i < 0 {
			continue
		}
		desc, err := writeImage(blobs, k.platform, opts, []layer{bases[i], app, delta})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.name, err)
		}
		img.Manifests[k.name] = desc.Digest
		index.Manifests = append(index.Manifests, desc)
	}
	indexDesc, err := writeJSONBlob(blobs, ocispec.MediaTypeImageIndex, index)
	if err != nil {
		return nil, fmt.Errorf("write index: %w", err)
	}
	img.IndexDigest = indexDesc.Digest

	indexDesc.Annotations = map[string]string{ocispec.AnnotationRefName: opts.Version}
	top, err := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{indexDesc},
	})
	if err != nil {
		return nil, fmt.Errorf("encode index.json: %w", err)
	}
	if err := writeFile(filepath.Join(dir, ocispec.ImageIndexFile), top); err != nil {
		return nil, err
	}
	return img, nil
}

// writeImage writes the config and manifest of one platform's image and
// returns the manifest's descriptor, with its platform.
func writeImage(blobs string, platform ocispec.Platform, opts Options, layers []layer) (ocispec.Descriptor, error) {
	version, extraEnv, extraArgs := opts.Version, opts.ExtraEnv, opts.ExtraArgs
	entrypoint, cmd, base := Entrypoint, Cmd, "oven/bun:1"
	switch opts.Shape {
	case ShapeWrapper:
		entrypoint, cmd = nil, WrapperCmd
	case ShapeDistroless, ShapeTree:
		entrypoint, cmd, base = nil, DistrolessCmd, "gcr.io/distroless/cc-debian12"
	}
	created := Epoch
	cfg := ocispec.Image{
		Created:  &created,
		Platform: platform,
		Config: ocispec.ImageConfig{
			Env:          append(slices.Clip(Env), extraEnv...),
			Entrypoint:   entrypoint,
			Cmd:          append(slices.Clip(cmd), extraArgs...),
			WorkingDir:   AppDir,
			Volumes:      map[string]struct{}{"/data": {}},
			ExposedPorts: map[string]struct{}{"4788/tcp": {}},
			Labels:       map[string]string{ocispec.AnnotationVersion: version},
		},
		RootFS: ocispec.RootFS{Type: "layers"},
	}
	history := []string{
		"hbx testimage: " + base + " stand-in with bun " + BunVersion,
		"hbx testimage: COPY the workspace to /app",
		"hbx testimage: whiteouts, VERSION and STATE_FORMAT",
	}
	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
	}
	for i, l := range layers {
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.diffID)
		cfg.History = append(cfg.History, ocispec.History{Created: &created, CreatedBy: history[i]})
		m.Layers = append(m.Layers, l.desc)
	}
	var err error
	m.Config, err = writeJSONBlob(blobs, ocispec.MediaTypeImageConfig, cfg)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("write config: %w", err)
	}
	desc, err := writeJSONBlob(blobs, ocispec.MediaTypeImageManifest, m)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("write manifest: %w", err)
	}
	desc.Platform = &platform
	return desc, nil
}

// writeLayer writes entries as a tar compressed with the compression of
// mediaType into the blob directory.
func writeLayer(blobs string, entries []entry, mediaType string) (l layer, err error) {
	bw, err := newBlobWriter(blobs)
	if err != nil {
		return layer{}, err
	}
	defer bw.abort()

	var comp io.WriteCloser
	switch mediaType {
	case ocispec.MediaTypeImageLayerGzip:
		// The header keeps its zero Name and ModTime.
		comp, err = gzip.NewWriterLevel(bw, gzipLevel)
	case ocispec.MediaTypeImageLayerZstd:
		comp, err = zstd.NewWriter(bw, zstd.WithEncoderLevel(zstdLevel), zstd.WithEncoderConcurrency(1))
	default:
		err = fmt.Errorf("media type %s: unsupported", mediaType)
	}
	if err != nil {
		return layer{}, err
	}
	diff := sha256.New()
	if err := writeTar(io.MultiWriter(comp, diff), entries); err != nil {
		comp.Close()
		return layer{}, err
	}
	if err := comp.Close(); err != nil {
		return layer{}, fmt.Errorf("compress: %w", err)
	}
	desc, err := bw.commit(mediaType)
	if err != nil {
		return layer{}, err
	}
	return layer{desc: desc, diffID: digest.NewDigest(digest.SHA256, diff)}, nil
}

// writeJSONBlob writes v as compact JSON into the blob directory.
func writeJSONBlob(blobs, mediaType string, v any) (ocispec.Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("encode %s: %w", mediaType, err)
	}
	bw, err := newBlobWriter(blobs)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	defer bw.abort()
	if _, err := bw.Write(data); err != nil {
		return ocispec.Descriptor{}, err
	}
	return bw.commit(mediaType)
}

// blobWriter writes a blob to a temporary file in the blob directory and
// renames it to its digest on commit.
type blobWriter struct {
	blobs string
	f     *os.File
	buf   *bufio.Writer
	hash  digest.Digester
	size  int64
}

func newBlobWriter(blobs string) (*blobWriter, error) {
	f, err := os.CreateTemp(blobs, ".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("create blob: %w", err)
	}
	return &blobWriter{blobs: blobs, f: f, buf: bufio.NewWriterSize(f, 1<<20), hash: digest.SHA256.Digester()}, nil
}

func (w *blobWriter) Write(p []byte) (int, error) {
	n, err := w.buf.Write(p)
	w.hash.Hash().Write(p[:n])
	w.size += int64(n)
	if err != nil {
		return n, fmt.Errorf("write blob: %w", err)
	}
	return n, nil
}

// commit publishes the blob and returns its descriptor.
func (w *blobWriter) commit(mediaType string) (ocispec.Descriptor, error) {
	if err := w.buf.Flush(); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("write blob: %w", err)
	}
	if err := w.f.Close(); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("close blob: %w", err)
	}
	d := w.hash.Digest()
	if err := os.Rename(w.f.Name(), filepath.Join(w.blobs, d.Encoded())); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("publish blob: %w", err)
	}
	w.f = nil
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: w.size}, nil
}

// abort removes an uncommitted blob.
func (w *blobWriter) abort() {
	if w.f != nil {
		w.f.Close()
		os.Remove(w.f.Name())
	}
}

// writeFile replaces path with data by rename.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}
