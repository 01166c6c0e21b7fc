package installer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/manifest"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/internal/readahead"
)

// Read-ahead shape: aheadChunks buffers of aheadChunk bytes (4 MiB),
// allocated once per install and reused from layer to layer, so memory does
// not grow with the number or size of layers. A buffer is handed to the
// extractor only once full (or at the stream's end), so chunks are small:
// while a slow download is followed, what has been inflated waits at most
// one chunk for more input before the extractor sees it.
const (
	aheadChunk  = 64 << 10
	aheadChunks = 64
)

type compression int

const (
	uncompressed compression = iota
	gzipped
	zstded
)

// layerCompression maps a layer media type (image-spec layer.md, Docker
// image manifest v2.2) to its compression. Foreign, non-distributable and
// encrypted layers are refused.
func layerCompression(mt string) (compression, error) {
	switch mt {
	case v1.MediaTypeImageLayer:
		return uncompressed, nil
	case v1.MediaTypeImageLayerGzip, manifest.DockerV2Schema2LayerMediaType:
		return gzipped, nil
	case v1.MediaTypeImageLayerZstd:
		return zstded, nil
	default:
		return 0, fmt.Errorf("%w %q", ErrUnsupported, mt)
	}
}

// zstd limits: a hostile stream must not make us allocate a huge window.
const zstdMaxWindow = 32 << 20

// zstdStart reports whether head, a stream's first 4 bytes, starts a zstd
// frame (magic 0xFD2FB528) or a skippable frame (magics 0x184D2A50 to
// 0x184D2A5F, RFC 8878 section 3.1.2), all little-endian. pzstd and
// seekable-format writers begin with a skippable frame; zstd(1) and
// containerd accept such streams, and the decoder skips the frame.
func zstdStart(head []byte) bool {
	if len(head) < 4 {
		return false
	}
	m := binary.LittleEndian.Uint32(head)
	return m == 0xFD2FB528 || m&0xFFFFFFF0 == 0x184D2A50
}

// unpacker applies layer blobs one after another. Each layer's blob is
// read, decompressed and hashed against its diff_id on a goroutine of its
// own, into a read-ahead ring of its own; the next layer's starts while
// this one is applied, so inflating layer N+1 overlaps the file writes of
// layer N (and its hash is ready when it ends). Two slots, reused from
// layer to layer: memory does not grow with the number or size of layers.
type unpacker struct {
	slots [2]*layerSlot
	next  *layerStream // the layer started ahead, nil when none
}

// layerSlot is the reusable state of one layer in flight.
type layerSlot struct {
	ra *readahead.Reader // the layer's decompressor read ahead, so inflating overlaps the extractor's writes
	gz *gzip.Reader      // nil until the slot's first gzip layer
	br *bufio.Reader
}

// layerJob is one layer to apply: its feed, descriptor, diff_id, index in
// the manifest, and what to call with the compressed bytes read so far.
type layerJob struct {
	index  int
	fd     *feed
	desc   v1.Descriptor
	diffID digest.Digest
	report func(done int64)
}

// layerJob returns layer i's job, nil past the last layer.
func (c *cold) layerJob(i int) *layerJob {
	layers := c.r.Manifest.Layers
	if i >= len(layers) {
		return nil
	}
	l := layers[i]
	report := func(done int64) {
		c.flusher.Kick()
		c.prog.Event(Event{Kind: EventLayerProgress, Digest: l.Digest, Size: l.Size, Done: done, Index: i, Count: len(layers)})
	}
	return &layerJob{index: i, fd: c.feeds[i], desc: l, diffID: c.r.Config.RootFS.DiffIDs[i], report: report}
}

func newUnpacker() *unpacker {
	u := &unpacker{}
	for i := range u.slots {
		u.slots[i] = &layerSlot{ra: readahead.New(aheadChunks, aheadChunk), br: bufio.NewReaderSize(nil, 256<<10)}
	}
	return u
}

// close stops every read-ahead still running after a failed layer and
// waits for them: call it once the blob feeds are closed, which ends a
// read a read-ahead is blocked in.
func (u *unpacker) close() {
	for _, s := range u.slots {
		s.ra.Abort()
	}
	for _, s := range u.slots {
		s.ra.Wait()
	}
}

// decompress returns the uncompressed stream of r per the media type,
// after checking the stream's magic bytes agree with it. The stream is
// valid until the slot's next call.
func (s *layerSlot) decompress(r *bufio.Reader, c compression) (io.Reader, func(), error) {
	head, err := r.Peek(4)
	if err != nil && err != io.EOF {
		return nil, nil, fmt.Errorf("read blob: %w", err)
	}
	switch c {
	case gzipped:
		if !bytes.HasPrefix(head, []byte{0x1f, 0x8b}) {
			return nil, nil, fmt.Errorf("media type says gzip, content is not gzip")
		}
		if s.gz == nil {
			s.gz, err = gzip.NewReader(r)
		} else {
			err = s.gz.Reset(r)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("gzip: %w", err)
		}
		return s.gz, func() {}, nil
	case zstded:
		if !zstdStart(head) {
			return nil, nil, fmt.Errorf("media type says zstd, content is not zstd")
		}
		zr, err := zstd.NewReader(r, zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, fmt.Errorf("zstd: %w", err)
		}
		return zr, zr.Close, nil
	default:
		return r, func() {}, nil
	}
}

// unverifiedExpansion bounds what a layer blob not yet checked against
// its digest may make the extractor write: at most this many times the
// blob's declared size of uncompressed bytes. A forged blob (the bytes must
// still be the declared size) thus writes a bounded amount into staging
// before its digest fails, not up to install.max_uncompressed_bytes.
// Layers that expand more (zero-filled files) are applied past the bound
// once their blob is verified: the stream then waits for the download.
const unverifiedExpansion = 8

// apply applies job's layer, read from its feed (its cache file, as it
// is written) through decompression on its own goroutine, and starts
// next's (when not nil) so it inflates meanwhile. The uncompressed stream
// is hashed here, on the extractor's side (inflate is the busier one), and
// checked against the diff_id once read to its end: the layer counts only
// once apply returned nil, and nothing is published before every layer's
// apply did.
func (u *unpacker) apply(ctx context.Context, cache blobCache, a *extract.Applier, job layerJob, next *layerJob) error {
	ls := u.next
	u.next = nil
	if ls == nil || ls.job.index != job.index {
		ls = u.start(ctx, job)
	}
	if next != nil {
		u.next = u.start(ctx, *next)
	}
	ls.live.Store(true)
	diffV := job.diffID.Verifier()
	r := io.TeeReader(ls.slot.ra, diffV)
	err := a.Apply(r)
	if err == nil {
		// The tar may end before the compressed stream does; hash all of
		// it, which also ends the read-ahead.
		if _, err = io.Copy(io.Discard, r); err != nil {
			err = fmt.Errorf("read past tar end: %w", err)
		}
	}
	var end *streamEndError
	if errors.As(err, &end) {
		err = end.err // the blob's tail, whichever read of the extractor met it
	}
	if err != nil {
		ls.slot.ra.Abort()
		return err
	}
	if !diffV.Verified() {
		cache.drop(job.desc.Digest) // a damaged cached blob is fetched again next time
		return fmt.Errorf("%w: uncompressed layer does not hash to diff_id %s", ErrDigestMismatch, job.diffID)
	}
	return nil
}

// start begins reading job's layer on a free slot: the one not holding
// the layer started before it.
func (u *unpacker) start(ctx context.Context, job layerJob) *layerStream {
	ls := &layerStream{job: job, ctx: ctx, slot: u.slots[job.index%len(u.slots)]}
	ls.slot.ra.Start(ls)
	return ls
}

// streamEndError carries what failed at a layer stream's end (reading the
// rest of the blob), so apply reports it as such whichever read of the
// extractor met it.
type streamEndError struct{ err error }

func (e *streamEndError) Error() string { return e.err.Error() }
func (e *streamEndError) Unwrap() error { return e.err }

// layerStream is one layer's uncompressed stream, the source its slot's
// read-ahead runs: it opens the blob on the first read (on the read-ahead's
// goroutine) and at the end reads the rest of the blob, so a stored blob's
// digest is checked before the stream ends.
type layerStream struct {
	job     layerJob
	ctx     context.Context
	slot    *layerSlot
	live    atomic.Bool  // progress is reported once the layer is being applied
	out     atomic.Int64 // uncompressed bytes handed on so far
	zr      io.Reader    // nil until opened
	release func()
}

func (ls *layerStream) Read(p []byte) (int, error) {
	if ls.zr == nil {
		if err := ls.open(); err != nil {
			return 0, err
		}
	}
	n, err := ls.zr.Read(p)
	ls.out.Add(int64(n))
	if err == io.EOF {
		err = ls.end()
	}
	return n, err
}

// open starts reading the blob and its decompressor. The blob's own
// digest is checked as it enters the cache: its feed ends only once it
// was (or with the download's error). What it decompresses to is checked
// against the diff_id, which the config (itself checked by digest) pins.
func (ls *layerStream) open() error {
	c, err := layerCompression(ls.job.desc.MediaType)
	if err != nil {
		return err
	}
	ls.slot.br.Reset(&progressReader{r: ls.job.fd.reader(ls.ctx), report: ls.job.report, live: &ls.live})
	zr, release, err := ls.slot.decompress(ls.slot.br, c)
	if err != nil {
		return err
	}
	ls.zr = &verifiedGate{r: zr, limit: unverifiedExpansion * max(ls.job.desc.Size, 1<<20), fd: ls.job.fd, ctx: ls.ctx}
	ls.release = release
	return nil
}

// end reads the blob past the compressed stream's end: io.EOF once all
// of it was read (and, for a download, verified).
func (ls *layerStream) end() error {
	ls.release()
	if _, err := io.Copy(io.Discard, ls.slot.br); err != nil {
		return &streamEndError{fmt.Errorf("read blob: %w", err)}
	}
	return io.EOF
}

// verifiedGate passes at most limit bytes of a layer's uncompressed stream
// until the layer's blob is complete and verified; then all of it. A blob
// reused from the store is not held back: it was verified when it was
// stored, and its own reader hashes it again only at its end, which the
// gate would never let it reach.
type verifiedGate struct {
	r        io.Reader
	n, limit int64
	verified bool
	fd       *feed
	ctx      context.Context
}

func (g *verifiedGate) Read(p []byte) (int, error) {
	if !g.verified && g.n+int64(len(p)) > g.limit {
		if g.n < g.limit {
			p = p[:g.limit-g.n]
		} else if stored, _ := g.fd.state(); stored != "" {
			g.verified = true
		} else {
			if err := g.fd.wait(g.ctx); err != nil {
				return 0, fmt.Errorf("wait for the blob's digest check: %w", err)
			}
			g.verified = true
		}
	}
	n, err := g.r.Read(p)
	g.n += int64(n)
	return n, err
}

// progressReader reports bytes read, at most every 100ms, once live.
type progressReader struct {
	r      io.Reader
	n      int64
	last   time.Time
	report func(int64)
	live   *atomic.Bool // nil: always
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.report != nil && (p.live == nil || p.live.Load()) && time.Since(p.last) >= 100*time.Millisecond {
		p.last = time.Now()
		p.report(p.n)
	}
	return n, err
}
