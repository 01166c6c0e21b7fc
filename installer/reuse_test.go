package installer

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/release"
)

// TestReusedBlobDamageIsCaught: a stored layer blob damaged after it was
// kept (same size, or shorter) is caught while extraction reads it,
// wherever the damage sits: in bytes the extractor would choke on, or in
// the gzip header's mtime, which extraction never sees and only the
// digest does. The blob is removed and fetched again in the same run, the
// store ends up sound, and the staged release equals a cold install of
// the same image.
func TestReusedBlobDamageIsCaught(t *testing.T) {
	for _, tc := range []struct {
		name    string
		layer   int
		damage  func(b []byte) []byte
		fetched int // layer blobs the staging fetches: the damaged one and the new top layer
	}{
		{"one byte in the middle", 0, func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b }, 2},
		{"gzip mtime, invisible to extraction", 0, func(b []byte) []byte { b[4] ^= 0xff; return b }, 2},
		{"first deflate byte", 0, func(b []byte) []byte { b[10] ^= 0xff; return b }, 2},
		{"last byte of a zstd layer", 1, func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b }, 2},
		{"truncated", 0, func(b []byte) []byte { return b[:len(b)/2] }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p1 := e.reg.publish(t, "executor", goodParts(hostPlat))
			if _, err := Install(context.Background(), e.opts(p1, func(o *Options) { o.KeepBlobs = true })); err != nil {
				t.Fatal(err)
			}
			l := e.reg.published(t, p1, tc.layer)
			p := storedBlob(e.runtime, l.Digest)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, tc.damage(b), 0o600); err != nil {
				t.Fatal(err)
			}
			p2 := e.reg.publish(t, "executor", v2Parts())
			res, err := Install(context.Background(), e.opts(p2, func(o *Options) { o.KeepBlobs, o.StageOnly, o.ExtractAll = true, true, true }))
			if err != nil {
				t.Fatalf("staging over a damaged stored blob: %v", err)
			}
			if res.Fetched != tc.fetched || res.Reused != 3-tc.fetched {
				t.Errorf("fetched %d, reused %d; want %d, %d", res.Fetched, res.Reused, tc.fetched, 3-tc.fetched)
			}
			if err := (blobCache{dir: filepath.Join(e.runtime, release.BlobsDir)}).check(l.Digest); err != nil {
				t.Errorf("the damaged layer's blob after the staging: %v", err)
			}
			cold := newEnv(t)
			cold.reg = e.reg
			want, err := Install(context.Background(), cold.opts(p2))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(readFiles(t, res.Release), readFiles(t, want.Release)); d != "" {
				t.Errorf("staged release's files.json differs from a cold install's (-staged +cold):\n%s", d)
			}
		})
	}
}

// TestReusedBlobDamageThenLyingRegistry: the run after a damaged stored
// blob fetches it like any other blob: a registry that serves the same
// damaged bytes is refused as lying (requested once, not retried), the
// error names the layer's fetch, and nothing is staged.
func TestReusedBlobDamageThenLyingRegistry(t *testing.T) {
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", goodParts(hostPlat))
	if _, err := Install(context.Background(), e.opts(p1, func(o *Options) { o.KeepBlobs = true })); err != nil {
		t.Fatal(err)
	}
	first := currentTarget(t, e.runtime)
	base := e.reg.published(t, p1, 0)
	damage(t, e.runtime, base.Digest)
	p2 := e.reg.publish(t, "executor", v2Parts())
	b, err := os.ReadFile(storedBlob(e.runtime, base.Digest))
	if err != nil {
		t.Fatal(err)
	}
	e.reg.mu.Lock()
	e.reg.blobs[base.Digest] = b
	e.reg.mu.Unlock()
	before := e.reg.requestsFor(base.Digest.String())
	_, err = Install(context.Background(), e.opts(p2, func(o *Options) { o.KeepBlobs, o.StageOnly, o.ExtractAll = true, true, true }))
	if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), "fetch layer "+base.Digest.String()) {
		t.Fatalf("Install over a damaged blob the registry also serves damaged = %v, want ErrDigestMismatch fetching %s", err, base.Digest)
	}
	if n := e.reg.requestsFor(base.Digest.String()) - before; n != 1 {
		t.Errorf("the damaged layer was requested %d times, want once", n)
	}
	if entries, _ := os.ReadDir(filepath.Join(e.runtime, release.StagingDir)); len(entries) != 0 {
		t.Errorf("staging left behind: %v", entries)
	}
	if _, err := os.Stat(storedBlob(e.runtime, base.Digest)); !os.IsNotExist(err) {
		t.Errorf("the damaged blob is still stored: %v", err)
	}
	if currentTarget(t, e.runtime) != first {
		t.Errorf("current moved")
	}
}

// TestReuseReadsStoredBlobsOnce: staging an image whose big layer is in
// the store reads that blob once: its digest is taken from the bytes
// extraction reads, not by a read of its own before them. Measured by the
// bytes this process read (/proc/self/io rchar).
func TestReuseReadsStoredBlobsOnce(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	big := make([]byte, 24<<20) // incompressible: the blob is as big as the file
	for i := range big {
		big[i] = byte(rnd.Uint32())
	}
	bigLayer := layerSpec{tar: tartest.New().Dir("opt", 0o755).File("opt/big", string(big), 0o644).Bytes()}
	parts := goodParts(hostPlat)
	parts.layers = append([]layerSpec{bigLayer}, parts.layers...)
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", parts)
	if _, err := Install(context.Background(), e.opts(p1, func(o *Options) { o.KeepBlobs = true })); err != nil {
		t.Fatal(err)
	}
	parts.layers = append(parts.layers, layerSpec{tar: tartest.New().File("app/v2", "the new top layer", 0o644).Bytes()})
	p2 := e.reg.publish(t, "executor", parts)
	size := e.reg.published(t, p2, 0).Size
	ev := &eventLog{}
	before := readBytes(t)
	res, err := Install(context.Background(), e.opts(p2, func(o *Options) { o.KeepBlobs, o.StageOnly, o.Progress, o.ExtractAll = true, true, ev, true }))
	if err != nil {
		t.Fatal(err)
	}
	read := readBytes(t) - before
	// A reused blob is "blob-done" (complete and verified) only once its
	// layer has read it all: right before its layer-done.
	done := 0
	for i, x := range ev.events {
		if x.Kind != EventBlobDone || x.Index != 0 {
			continue
		}
		done++
		if i+1 == len(ev.events) || ev.events[i+1].Kind != EventLayerDone || ev.events[i+1].Index != 0 {
			t.Errorf("event %d: blob-done of the reused layer 0 is not followed by its layer-done: %+v", i, ev.events)
		}
	}
	if done != 1 {
		t.Errorf("%d blob-done events for the reused layer 0, want 1", done)
	}
	if res.Reused != 3 || res.Fetched != 1 {
		t.Fatalf("fetched %d, reused %d; want 1, 3", res.Fetched, res.Reused)
	}
	if read > size*3/2 {
		t.Errorf("staging read %d bytes for a stored %d-byte blob; want it read once (at most 1.5 times its size)", read, size)
	}
}

// readBytes is this process's rchar: every byte read(2) and its kin
// returned, page cache or not.
func readBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("rchar: ")); ok {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no rchar in /proc/self/io")
	return 0
}

func readFiles(t *testing.T, inst *release.Installed) []release.File {
	t.Helper()
	fs, err := inst.ReadFiles()
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestReuseExpandingLayer: a stored layer that expands far beyond the
// bound put on unverified downloads (40 MiB of zeros in a blob of a few
// KiB) is applied from the store without waiting for a verdict only its
// own end can give.
func TestReuseExpandingLayer(t *testing.T) {
	parts := goodParts(hostPlat)
	parts.layers = append(parts.layers, layerSpec{tar: tartest.New().File("zeros", strings.Repeat("\x00", 40<<20), 0o644).Bytes()})
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", parts)
	if _, err := Install(context.Background(), e.opts(p1, func(o *Options) { o.KeepBlobs = true })); err != nil {
		t.Fatal(err)
	}
	parts.layers = append(parts.layers, layerSpec{tar: tartest.New().File("app/v2", "the new top layer", 0o644).Bytes()})
	p2 := e.reg.publish(t, "executor", parts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Install(ctx, e.opts(p2, func(o *Options) { o.KeepBlobs, o.StageOnly = true, true }))
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused != 3 {
		t.Errorf("reused %d layers, want 3", res.Reused)
	}
}
