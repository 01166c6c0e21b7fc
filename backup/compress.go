package backup

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"runtime"

	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
)

// gzipLevel is the deflate level of written archives: klauspost's level 5
// compresses within a few percent of gzip -6 at several times its speed.
const gzipLevel = 5

// compressor returns a writer compressing into w with c; Close flushes it
// without closing w.
func compressor(w io.Writer, c Compression) (io.WriteCloser, error) {
	n := runtime.GOMAXPROCS(0)
	switch c {
	case Gzip:
		zw, err := pgzip.NewWriterLevel(w, gzipLevel)
		if err != nil {
			return nil, fmt.Errorf("start gzip: %w", err)
		}
		if err := zw.SetConcurrency(1<<20, 2*n); err != nil {
			return nil, fmt.Errorf("start gzip: %w", err)
		}
		return zw, nil
	case Zstd:
		zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(n))
		if err != nil {
			return nil, fmt.Errorf("start zstd: %w", err)
		}
		return zw, nil
	}
	return nil, fmt.Errorf("%w: compression %q (want gzip or zstd)", ErrInvalid, c)
}

// Magic numbers of the streams decompressor recognises.
var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// decompressor sniffs r and returns the uncompressed stream (r itself for a
// plain tar), the compression's name ("gzip", "zstd" or "none") and a
// release function. The stream reports a damaged or truncated input as an
// error wrapping ErrCorrupt when read to its end.
func decompressor(r *bufio.Reader) (io.Reader, string, func(), error) {
	head, _ := r.Peek(4)
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		zr, err := pgzip.NewReader(r)
		if err != nil {
			return nil, "", nil, fmt.Errorf("%w: gzip: %w", ErrCorrupt, err)
		}
		return &corruptReader{r: zr, what: "gzip"}, string(Gzip), func() { zr.Close() }, nil
	case bytes.HasPrefix(head, zstdMagic):
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithDecoderMaxWindow(1<<30))
		if err != nil {
			return nil, "", nil, fmt.Errorf("%w: zstd: %w", ErrCorrupt, err)
		}
		return &corruptReader{r: zr, what: "zstd"}, string(Zstd), zr.Close, nil
	}
	return r, "none", func() {}, nil
}

// corruptReader wraps decompression errors in ErrCorrupt, unless they
// already carry one of ours (a decryption error underneath).
type corruptReader struct {
	r    io.Reader
	what string
}

func (c *corruptReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF && !isOurs(err) {
		err = fmt.Errorf("%w: %s: %w", ErrCorrupt, c.what, err)
	}
	return n, err
}
