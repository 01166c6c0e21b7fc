// Package benchimage builds the realistic image the install benchmark races
// on: the shape of a Bun app image as ../shared/BENCHMARKING.md measures it
// (one linux/amd64 child, 4 gzip layers, ~150 MB compressed, ~517 MB
// uncompressed, ~20,650 files: a 90 MiB binary, a 20,000-file node_modules
// tree of 256 B–128 KiB files, and a top layer with 4 whiteouts and one
// opaque whiteout).
//
// Content is pseudo-random but deterministic (fixed seed): text drawn from a
// pool of JavaScript-like tokens, so gzip compresses it about as much as a
// real node_modules tree; the binary mixes that text with incompressible
// bytes. The same Options give the same digests.
//
// Version 2 of an image (Options.Version) is the upgrade the benchmark
// stages: the same three base layers, byte for byte (same digests), under
// a new top layer that also carries a rebuilt app bundle (app/dist, about
// 8 MiB of text), so an upgrade needs only that layer and the new config.
package benchimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/klauspost/pgzip"
	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// Options size the image. Scale 1 is the BENCHMARKING.md shape; 0.5 halves
// the file count and the binary, for showing memory does not grow with size.
// Version 0 or 1 is the first version; 2 is the upgrade: the same base
// layers under a different top layer.
//
// SmallFiles, when positive, builds the entry-count image instead: the
// base layer, then one layer of SmallFiles files of 16 to 80 bytes, 1,000
// to a directory (dir-NNNN/fNNN), for measuring what install and verify
// keep per entry; Scale and Version are then ignored.
type Options struct {
	Scale      float64
	Version    int
	SmallFiles int
}

// Image is a built OCI layout.
type Image struct {
	Dir          string
	IndexDigest  digest.Digest
	Manifest     digest.Digest
	Files        int   // regular files across all layers
	Uncompressed int64 // bytes of the layer tars
	Compressed   int64 // bytes of the layer blobs
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Build writes the image as an OCI layout into dir (created if missing).
func Build(dir string, o Options) (*Image, error) {
	if o.Scale <= 0 {
		o.Scale = 1
	}
	if o.Version < 0 || o.Version > 2 {
		return nil, fmt.Errorf("build bench image: version %d: want 1 or 2", o.Version)
	}
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pool := textPool(rng, 4<<20)
	g := &gen{rng: rng, pool: pool}
	img := &Image{Dir: dir}
	var layers []v1.Descriptor
	var diffs []digest.Digest
	fills := []func(*tar.Writer) error{
		g.base,
		func(tw *tar.Writer) error { return g.binary(tw, int64(90<<20*o.Scale)) },
		func(tw *tar.Writer) error { return g.nodeModules(tw, int(20000*o.Scale)) },
		func(tw *tar.Writer) error { return g.top(tw, o.Version) },
	}
	if o.SmallFiles > 0 {
		fills = []func(*tar.Writer) error{g.base, func(tw *tar.Writer) error { return g.smallFiles(tw, o.SmallFiles) }}
	}
	for _, fill := range fills {
		d, diff, n, err := writeLayer(blobs, fill)
		if err != nil {
			return nil, err
		}
		layers = append(layers, d)
		diffs = append(diffs, diff)
		img.Uncompressed += n
		img.Compressed += d.Size
	}
	img.Files = g.files
	cfg := v1.Image{
		Created:  &epoch,
		Platform: v1.Platform{OS: "linux", Architecture: "amd64"},
		Config: v1.ImageConfig{
			Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cmd:        []string{"app-launcher", "serve"},
			WorkingDir: "/app",
		},
		RootFS: v1.RootFS{Type: "layers", DiffIDs: diffs},
	}
	cd, err := writeJSON(blobs, v1.MediaTypeImageConfig, cfg)
	if err != nil {
		return nil, err
	}
	md, err := writeJSON(blobs, v1.MediaTypeImageManifest, v1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageManifest, Config: cd, Layers: layers})
	if err != nil {
		return nil, err
	}
	md.Platform = &v1.Platform{OS: "linux", Architecture: "amd64"}
	img.Manifest = md.Digest
	id, err := writeJSON(blobs, v1.MediaTypeImageIndex, v1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageIndex, Manifests: []v1.Descriptor{md}})
	if err != nil {
		return nil, err
	}
	img.IndexDigest = id.Digest
	id.Annotations = map[string]string{v1.AnnotationRefName: "bench"}
	top, _ := json.Marshal(v1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageIndex, Manifests: []v1.Descriptor{id}})
	if err := os.WriteFile(filepath.Join(dir, "index.json"), top, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return nil, err
	}
	return img, nil
}

// textPool makes n bytes of JavaScript-like text.
func textPool(rng *rand.Rand, n int) []byte {
	words := make([]string, 250)
	const letters = "abcdefghijklmnopqrstuvwxyzabcdeeeiiooaaunrstlmCDEFGHIJKLMNOPRSTU_$"
	for i := range words {
		l := 3 + rng.IntN(8)
		var b strings.Builder
		for range l {
			b.WriteByte(letters[rng.IntN(len(letters))])
		}
		words[i] = b.String()
	}
	punct := []string{"(", ")", "{", "}", ";\n", " = ", ".", ", ", " => ", "return ", "const ", "function ", "\n  ", "\"", "'", "[", "]", " + ", " === "}
	var b strings.Builder
	for b.Len() < n {
		// Zipf-ish: frequent words more often.
		w := words[int(math.Pow(rng.Float64(), 2.5)*float64(len(words)))]
		b.WriteString(w)
		b.WriteString(punct[rng.IntN(len(punct))])
	}
	return []byte(b.String()[:n])
}

type gen struct {
	rng   *rand.Rand
	pool  []byte
	files int
}

func (g *gen) text(n int) []byte {
	off := g.rng.IntN(len(g.pool) - n)
	return g.pool[off : off+n]
}

func (g *gen) dir(tw *tar.Writer, name string) error {
	return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX})
}

func (g *gen) file(tw *tar.Writer, name string, mode int64, body []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	g.files++
	_, err := tw.Write(body)
	return err
}

func (g *gen) base(tw *tar.Writer) error {
	for _, d := range []string{"bin", "etc", "tmp", "usr", "usr/lib", "usr/local", "usr/local/bin", "var", "run", "app"} {
		if err := g.dir(tw, d); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "var/run", Linkname: "/run", ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if err := g.file(tw, "etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n")); err != nil {
		return err
	}
	// The entry program install validation follows: a #!/bin/sh script (the big binary is not executable code).
	if err := g.file(tw, "usr/local/bin/app-launcher", 0o755, []byte("#!/bin/sh\necho app 1.0\n")); err != nil {
		return err
	}
	for i := range 600 {
		if err := g.file(tw, fmt.Sprintf("usr/lib/lib%03d.so", i), 0o644, g.text(2048+g.rng.IntN(14000))); err != nil {
			return err
		}
	}
	return nil
}

func (g *gen) binary(tw *tar.Writer, size int64) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "usr/local/bin/app", Mode: 0o755, Size: size, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	g.files++
	chunk := make([]byte, 64<<10)
	for left := size; left > 0; {
		n := int64(len(chunk))
		if n > left {
			n = left
		}
		if g.rng.IntN(6) == 0 {
			for i := range chunk[:n] {
				chunk[i] = byte(g.rng.Uint32())
			}
		} else {
			copy(chunk, g.text(int(n)))
		}
		if _, err := tw.Write(chunk[:n]); err != nil {
			return err
		}
		left -= n
	}
	return nil
}

func (g *gen) nodeModules(tw *tar.Writer, files int) error {
	if err := g.dir(tw, "app/node_modules"); err != nil {
		return err
	}
	perPkg := 10
	for p := 0; p*perPkg < files; p++ {
		pkg := fmt.Sprintf("app/node_modules/pkg-%04d", p)
		for _, d := range []string{pkg, pkg + "/lib", pkg + "/dist"} {
			if err := g.dir(tw, d); err != nil {
				return err
			}
		}
		for f := 0; f < perPkg && p*perPkg+f < files; f++ {
			// log-uniform 256 B .. 128 KiB
			size := int(math.Exp(math.Log(256) + g.rng.Float64()*(math.Log(128<<10)-math.Log(256))))
			name := fmt.Sprintf("%s/%s/f%02d.js", pkg, []string{"lib", "dist"}[f%2], f)
			if f == 0 {
				name = pkg + "/package.json"
			}
			if err := g.file(tw, name, 0o644, g.text(size)); err != nil {
				return err
			}
		}
	}
	return nil
}

// smallFiles writes n files of 16 to 80 bytes, 1,000 to a directory.
func (g *gen) smallFiles(tw *tar.Writer, n int) error {
	for i := range n {
		if i%1000 == 0 {
			if err := g.dir(tw, fmt.Sprintf("many/dir-%04d", i/1000)); err != nil {
				return err
			}
		}
		if err := g.file(tw, fmt.Sprintf("many/dir-%04d/f%03d", i/1000, i%1000), 0o644, g.text(16+g.rng.IntN(65))); err != nil {
			return err
		}
	}
	return nil
}

// top writes the top layer of version v: whiteouts and an opaque
// directory; version 2 also rewrites app/VERSION and adds app/dist, 256
// JavaScript-like files of 16–48 KiB (the app bundle an upgrade changes).
func (g *gen) top(tw *tar.Writer, v int) error {
	for i := range 4 {
		if err := g.file(tw, fmt.Sprintf("app/node_modules/pkg-%04d/lib/.wh.f02.js", i), 0o644, nil); err != nil {
			return err
		}
	}
	if err := g.file(tw, "app/node_modules/pkg-0010/.wh..wh..opq", 0o644, nil); err != nil {
		return err
	}
	if err := g.file(tw, "app/node_modules/pkg-0010/package.json", 0o644, []byte(`{"name":"replaced"}`)); err != nil {
		return err
	}
	if v < 2 {
		return g.file(tw, "app/VERSION", 0o644, []byte("bench\n"))
	}
	if err := g.file(tw, "app/VERSION", 0o644, []byte("bench 2\n")); err != nil {
		return err
	}
	if err := g.dir(tw, "app/dist"); err != nil {
		return err
	}
	for i := range 256 {
		if err := g.file(tw, fmt.Sprintf("app/dist/chunk-%03d.js", i), 0o644, g.text(16<<10+g.rng.IntN(32<<10))); err != nil {
			return err
		}
	}
	return nil
}

// writeLayer streams a tar through pgzip into a blob, returning the
// descriptor, the diff_id and the uncompressed size.
func writeLayer(blobs string, fill func(*tar.Writer) error) (v1.Descriptor, digest.Digest, int64, error) {
	tmp, err := os.CreateTemp(blobs, ".layer-")
	if err != nil {
		return v1.Descriptor{}, "", 0, err
	}
	defer os.Remove(tmp.Name())
	ch := sha256.New()
	zw, _ := pgzip.NewWriterLevel(io.MultiWriter(tmp, ch), 6)
	zw.SetConcurrency(1<<20, 4)
	dh := sha256.New()
	cnt := &counter{w: io.MultiWriter(zw, dh)}
	tw := tar.NewWriter(cnt)
	if err := fill(tw); err != nil {
		return v1.Descriptor{}, "", 0, err
	}
	if err := tw.Close(); err != nil {
		return v1.Descriptor{}, "", 0, err
	}
	if err := zw.Close(); err != nil {
		return v1.Descriptor{}, "", 0, err
	}
	st, err := tmp.Stat()
	if err != nil {
		return v1.Descriptor{}, "", 0, err
	}
	if err := tmp.Close(); err != nil {
		return v1.Descriptor{}, "", 0, err
	}
	d := sum(ch)
	if err := os.Rename(tmp.Name(), filepath.Join(blobs, d.Encoded())); err != nil {
		return v1.Descriptor{}, "", 0, err
	}
	return v1.Descriptor{MediaType: v1.MediaTypeImageLayerGzip, Digest: d, Size: st.Size()}, sum(dh), cnt.n, nil
}

func sum(h hash.Hash) digest.Digest { return digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil)) }

type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func writeJSON(blobs, mt string, v any) (v1.Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return v1.Descriptor{}, err
	}
	d := digest.FromBytes(b)
	if err := os.WriteFile(filepath.Join(blobs, d.Encoded()), b, 0o644); err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: d, Size: int64(len(b))}, nil
}
