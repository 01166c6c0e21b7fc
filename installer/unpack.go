package installer

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"time"

	"github.com/hermesbox/hbx/extract"
	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/manifest"
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

// decompress wraps r per the media type, after checking the stream's magic
// bytes agree with it.
func decompress(r *bufio.Reader, c compression) (io.ReadCloser, error) {
	head, _ := r.Peek(4)
	switch c {
	case gzipped:
		if !bytes.HasPrefix(head, []byte{0x1f, 0x8b}) {
			return nil, fmt.Errorf("media type says gzip, content is not gzip")
		}
		// 8 read-ahead blocks of 1 MiB keep the extractor fed while
		// inflate runs on its own goroutine, in bounded memory.
		zr, err := pgzip.NewReaderN(r, 1<<20, 8)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, nil
	case zstded:
		if !bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			return nil, fmt.Errorf("media type says zstd, content is not zstd")
		}
		zr, err := zstd.NewReader(r, zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return zr.IOReadCloser(), nil
	default:
		return io.NopCloser(r), nil
	}
}

// applyLayer streams one cached layer blob through its digest check,
// decompression and diff_id check into the applier.
func applyLayer(cache blobCache, a *extract.Applier, desc v1.Descriptor, diffID digest.Digest, report func(done int64)) error {
	c, err := layerCompression(desc.MediaType)
	if err != nil {
		return err
	}
	f, err := cache.open(desc.Digest)
	if err != nil {
		return fmt.Errorf("open cached blob: %w", err)
	}
	defer f.Close()
	// The blob's own digest was checked when it entered the cache; what it
	// decompresses to is checked here against the diff_id, which the
	// config (itself checked by digest) pins. Hashing the compressed bytes
	// again would only slow the critical path.
	counted := &progressReader{r: f, report: report}
	br := bufio.NewReaderSize(counted, 1<<20)
	zr, err := decompress(br, c)
	if err != nil {
		return err
	}
	defer zr.Close()
	diffV := diffID.Verifier()
	if err := a.Apply(io.TeeReader(zr, diffV)); err != nil {
		return err
	}
	// The tar may end before the compressed stream does; hash all of both.
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return fmt.Errorf("read past tar end: %w", err)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return fmt.Errorf("read blob: %w", err)
	}
	if !diffV.Verified() {
		cache.drop(desc.Digest) // a damaged cached blob is fetched again next time
		return fmt.Errorf("%w: uncompressed layer does not hash to diff_id %s", ErrDigestMismatch, diffID)
	}
	return nil
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
