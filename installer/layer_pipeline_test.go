package installer

// The layer pipeline (unpack.go): layer N+1 is read, inflated and hashed
// against its diff_id while layer N is applied. These tests prove it runs
// ahead, that the tree and files.json are what applying the layers one
// after another gives, and that a failure of the layer in flight (corrupt
// stream, wrong diff_id, an interrupt) names that layer, publishes nothing
// and leaves no goroutine behind.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/release"
)

// overridingLayers are four layers in which each later one replaces,
// whites out or hides what earlier ones made, each big enough (several
// read-ahead rings of noise) that the next one is in flight while it is
// applied.
func overridingLayers() [][]byte {
	noise := func(seed uint64) string { return string(noiseBytes(seed, 5<<20)) }
	var many strings.Builder
	base := tartest.New().
		Dir("usr", 0o755).Dir("usr/local", 0o755).Dir("usr/local/bin", 0o755).
		File("usr/local/bin/bun", "#!/bin/sh\necho 1.3.14\n", 0o755).
		Dir("var", 0o755).Symlink("var/run", "/run").
		Dir("app", 0o755).Dir("app/lib", 0o755).Dir("app/gone", 0o755).Dir("app/opq", 0o755).
		File("app/big", noise(41), 0o644).
		File("app/gone/x", "x", 0o644).File("app/opq/old", "old", 0o644).
		File("app/replaced", "v1", 0o644).File("app/becomes-dir", "file", 0o644)
	for i := range 300 {
		fmt.Fprintf(&many, "%d\n", i)
		base.File(fmt.Sprintf("app/lib/f%03d.js", i), many.String(), 0o644)
	}
	second := tartest.New().
		File("app/big2", noise(42), 0o755).
		File("app/replaced", "v2", 0o600).
		Whiteout("app", "gone").
		Whiteout("app/lib", "f007.js").
		Opaque("app/opq").File("app/opq/new", "new", 0o644).
		Whiteout("app", "becomes-dir").Dir("app/becomes-dir", 0o755).File("app/becomes-dir/in", "in", 0o644).
		Symlink("app/link", "big2")
	third := tartest.New().
		File("app/big", noise(43), 0o644). // the first layer's big file, rewritten
		File("app/replaced", "v3", 0o644).
		Dir("app/gone", 0o755).File("app/gone/y", "y", 0o644). // back under the whited-out name
		Whiteout("app", "link").Symlink("app/link", "big")
	top := tartest.New().
		Whiteout("app", "big2").
		File("app/lib/f007.js", "again", 0o644).
		Dir("app/src", 0o755).File("app/src/serve.ts", "console.log(1)\n", 0o644)
	return [][]byte{base.Bytes(), second.Bytes(), third.Bytes(), top.Bytes()}
}

// sequentialTree applies tars one after another, without the pipeline,
// and lists the tree as files.json would.
func sequentialTree(t *testing.T, tars [][]byte) []release.File {
	t.Helper()
	root := t.TempDir()
	a, err := extract.New(root, extract.Options{RuntimeModes: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i, tb := range tars {
		if err := a.Apply(strings.NewReader(string(tb))); err != nil {
			t.Fatalf("Apply(layer %d) = %v", i, err)
		}
	}
	files, err := release.Scan(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// storedFeed is a feed on a complete blob file, as the cache hands over a
// verified download.
func storedFeed(t *testing.T, blob []byte) *feed {
	t.Helper()
	path := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(path, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fd := newFeed()
	fd.open(f, int64(len(blob)))
	fd.finish(true, nil)
	t.Cleanup(fd.close)
	return fd
}

// TestPipelineInflatesNextLayerAhead: while layer N is applied, layer N+1
// is inflated (its stream has bytes out before its apply starts), and the
// tree and the recorded hashes are those of applying the layers in turn.
func TestPipelineInflatesNextLayerAhead(t *testing.T) {
	tars := overridingLayers()
	jobs := make([]layerJob, len(tars))
	for i, tb := range tars {
		blob := compress(t, tb, v1.MediaTypeImageLayerGzip)
		jobs[i] = layerJob{index: i, fd: storedFeed(t, blob), report: func(int64) {},
			desc:   v1.Descriptor{MediaType: v1.MediaTypeImageLayerGzip, Digest: digest.FromBytes(blob), Size: int64(len(blob))},
			diffID: digest.FromBytes(tb)}
	}
	root, spill := t.TempDir(), t.TempDir()
	a, err := extract.New(root, extract.Options{RuntimeModes: true, HashFiles: true, SpillDir: spill})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	u := newUnpacker()
	defer u.close()
	for i := range jobs {
		var next *layerJob
		if i+1 < len(jobs) {
			next = &jobs[i+1]
		}
		if err := u.apply(context.Background(), blobCache{dir: t.TempDir()}, a, jobs[i], next); err != nil {
			t.Fatalf("apply(layer %d) = %v", i, err)
		}
		if next == nil {
			continue
		}
		// The next layer inflates without anyone reading it: it fills its
		// ring (or ends, when smaller) and waits.
		want := int64(min(aheadChunks*aheadChunk, len(tars[i+1])))
		for deadline := time.Now().Add(30 * time.Second); u.next.out.Load() < want; {
			if time.Now().After(deadline) {
				t.Fatalf("layer %d: %d bytes inflated ahead after 30s, want %d (a full ring, or the layer)", i+1, u.next.out.Load(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	got, err := release.Scan(root, a.FileHash)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, sequentialTree(t, tars)); diff != "" {
		t.Errorf("pipelined tree (-got +want, want: applied in turn):\n%s", diff)
	}
}

// TestInstallPipelinedLayersSameResult: a registry install of the
// overriding layers records in files.json, and leaves on disk, the tree
// that applying them in turn gives.
func TestInstallPipelinedLayersSameResult(t *testing.T) {
	h := newHostileRegistry(t)
	var raw []rawLayer
	tars := overridingLayers()
	for _, tb := range tars {
		raw = append(raw, gzLayer(t, tb))
	}
	ref, _, md := h.publishRaw(t, "pipeline", raw)
	o := h.opts(t, ref, md)
	res, err := Install(context.Background(), o)
	if err != nil {
		t.Fatalf("Install() = %v", err)
	}
	want := sequentialTree(t, tars)
	recorded, err := res.Release.ReadFiles()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(recorded, want); diff != "" {
		t.Errorf("files.json (-got +want, want: applied in turn):\n%s", diff)
	}
	onDisk, err := release.Scan(res.Release.Rootfs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(onDisk, want); diff != "" {
		t.Errorf("installed tree (-got +want, want: applied in turn):\n%s", diff)
	}
}

// TestPipelineFailureOfLayerInFlight: the layer after a big one is
// damaged (its gzip stream corrupt, or its diff_id wrong) while the big
// one is applied. The install fails naming the damaged layer, not the
// one being applied, activates nothing and leaves no goroutine.
func TestPipelineFailureOfLayerInFlight(t *testing.T) {
	tars := overridingLayers()
	corrupt := func(t *testing.T) rawLayer {
		l := gzLayer(t, tars[2])
		blob := append([]byte(nil), l.blob...)
		for i := len(blob) / 3; i < len(blob)/3+64; i++ {
			blob[i] ^= 0x5a // a deflate block in the middle, the digest taken after
		}
		return rawLayer{blob: blob, mediaType: l.mediaType, diffID: l.diffID}
	}
	cases := []struct {
		name  string
		layer func(t *testing.T) rawLayer
		is    error
		want  string // after "extract layer <digest>: "
	}{
		{"corrupt gzip stream", corrupt, nil, ""},
		{"wrong diff_id", func(t *testing.T) rawLayer {
			l := gzLayer(t, tars[2])
			l.diffID = digest.FromString("another tar")
			return l
		}, ErrDigestMismatch, "digest mismatch: uncompressed layer does not hash to diff_id " + digest.FromString("another tar").String()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHostileRegistry(t)
			bad := c.layer(t)
			ref, descs, md := h.publishRaw(t, "pipeline", []rawLayer{gzLayer(t, tars[0]), gzLayer(t, tars[1]), bad, gzLayer(t, tars[3])})
			o := h.opts(t, ref, md, func(o *Options) { o.KeepBlobs = true })
			_, err := Install(context.Background(), o)
			prefix := "extract layer " + descs[2].Digest.String() + ": "
			if err == nil || !strings.HasPrefix(err.Error(), prefix+c.want) || (c.is != nil && !errors.Is(err, c.is)) {
				t.Fatalf("Install() = %v; want an error starting %q", err, prefix+c.want)
			}
			assertRefused(t, o.RuntimeDir, descs[2].Digest)
			if c.is == ErrDigestMismatch {
				if _, err := os.Stat(filepath.Join(o.RuntimeDir, release.BlobsDir, "sha256", descs[2].Digest.Encoded())); err == nil {
					t.Errorf("blob %s kept although it does not inflate to its diff_id", descs[2].Digest)
				}
			}
		})
	}
}

// TestPipelineInterruptedWithLayerInFlight: the install is interrupted
// while the next layer's blob is half downloaded (its read-ahead started
// and waiting for bytes) and the layer before may still be applied. It
// returns promptly with context.Canceled, leaves nothing, and every
// goroutine it started is gone (counted, as well as looked for by name).
func TestPipelineInterruptedWithLayerInFlight(t *testing.T) {
	tars := overridingLayers()
	h := newHostileRegistry(t)
	var raw []rawLayer
	for _, tb := range tars {
		raw = append(raw, gzLayer(t, tb))
	}
	ref, descs, md := h.publishRaw(t, "pipeline", raw)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.hook(descs[2].Digest, func(w http.ResponseWriter, req *http.Request, body []byte) {
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Write(body[:len(body)/2])
		flush(w)
		cancel()
		holdUntil(req, nil, 10*time.Second)
	})
	o := h.opts(t, ref, md)
	before := runtime.NumGoroutine()
	select {
	case err := <-installAsync(ctx, o):
		if !errors.Is(err, context.Canceled) || !regexp.MustCompile(`^interrupted at layer \d/4 sha256:`).MatchString(err.Error()) {
			t.Errorf("Install() = %v; want context.Canceled naming the layer it stopped", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Install() still running 20s after its context was cancelled")
	}
	assertRefused(t, o.RuntimeDir, descs[2].Digest)
	h.srv.CloseClientConnections()
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines 10s after Install returned, %d before it:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
