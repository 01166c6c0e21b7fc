package installer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
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

// unpacker applies layer blobs one after another, reusing its read-ahead
// buffers and gzip state from layer to layer.
type unpacker struct {
	ra *readahead.Reader // the layer's decompressor read ahead, so inflating overlaps the extractor's writes
	gz *gzip.Reader      // nil until the first gzip layer
	br *bufio.Reader
}

func newUnpacker() *unpacker {
	return &unpacker{ra: readahead.New(aheadChunks, aheadChunk), br: bufio.NewReaderSize(nil, 256<<10)}
}

// close stops a read-ahead still running after a failed layer and waits
// for it: call it once the blob feeds are closed, which ends a read the
// read-ahead is blocked in.
func (u *unpacker) close() { u.ra.Abort(); u.ra.Wait() }

// decompress returns the uncompressed stream of r per the media type,
// after checking the stream's magic bytes agree with it. The stream is
// valid until the next call.
func (u *unpacker) decompress(r *bufio.Reader, c compression) (io.Reader, func(), error) {
	head, err := r.Peek(4)
	if err != nil && err != io.EOF {
		return nil, nil, fmt.Errorf("read blob: %w", err)
	}
	switch c {
	case gzipped:
		if !bytes.HasPrefix(head, []byte{0x1f, 0x8b}) {
			return nil, nil, fmt.Errorf("media type says gzip, content is not gzip")
		}
		if u.gz == nil {
			u.gz, err = gzip.NewReader(r)
		} else {
			err = u.gz.Reset(r)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("gzip: %w", err)
		}
		return u.gz, func() {}, nil
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

// apply streams one layer blob, read from fd (its cache file, as it is
// written), through decompression (read ahead on its own goroutine) and
// the diff_id check into the applier.
func (u *unpacker) apply(ctx context.Context, cache blobCache, a *extract.Applier, fd *feed, desc v1.Descriptor, diffID digest.Digest, report func(done int64)) error {
	c, err := layerCompression(desc.MediaType)
	if err != nil {
		return err
	}
	// The blob's own digest is checked as it enters the cache: blob ends
	// only once it was (or with the download's error). What it
	// decompresses to is checked here against the diff_id, which the
	// config (itself checked by digest) pins.
	u.br.Reset(&progressReader{r: fd.reader(ctx), report: report})
	zr, release, err := u.decompress(u.br, c)
	if err != nil {
		return err
	}
	u.ra.Start(&verifiedGate{r: zr, limit: unverifiedExpansion * max(desc.Size, 1<<20), fd: fd, ctx: ctx})
	diffV := diffID.Verifier()
	err = a.Apply(io.TeeReader(u.ra, diffV))
	if err == nil {
		// The tar may end before the compressed stream does; hash all of
		// both, which also ends the read-ahead.
		if _, err = io.Copy(io.Discard, u.ra); err != nil {
			err = fmt.Errorf("read past tar end: %w", err)
		}
	}
	if err != nil {
		u.ra.Abort()
		return err
	}
	release()
	if _, err := io.Copy(io.Discard, u.br); err != nil {
		return fmt.Errorf("read blob: %w", err)
	}
	if !diffV.Verified() {
		cache.drop(desc.Digest) // a damaged cached blob is fetched again next time
		return fmt.Errorf("%w: uncompressed layer does not hash to diff_id %s", ErrDigestMismatch, diffID)
	}
	return nil
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

// progressReader reports bytes read, at most every 100ms.
type progressReader struct {
	r      io.Reader
	n      int64
	last   time.Time
	report func(int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.report != nil && time.Since(p.last) >= 100*time.Millisecond {
		p.last = time.Now()
		p.report(p.n)
	}
	return n, err
}
