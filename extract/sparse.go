package extract

import (
	"archive/tar"
	"bytes"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// holeBlock is the granularity at which a sparse entry's zeros become
// holes: a block of this many bytes, aligned to the file's start, that is
// all zeros is not written. 4 KiB is the block size of ext4 and xfs; on a
// filesystem with larger blocks a skipped range inside an allocated block
// still reads back as zeros.
const holeBlock = 4096

var zeroBlock [holeBlock]byte

// isSparse reports whether hdr is a sparse entry in any of the forms
// archive/tar reads (its holes come out of the reader as zeros): the old
// GNU type 'S', or GNU's PAX records (formats 0.0, 0.1 and 1.0).
func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// holeWriter writes a sparse entry's content at increasing offsets of f
// with pwrite, leaving every all-zero holeBlock out, so the archive's
// holes (and any block of zeros in its data) stay holes on disk and cost
// no space; finish sets the file's size with ftruncate. GNU tar likewise
// seeks past the holes its sparse map names.
type holeWriter struct {
	f   regFile
	off int64
}

// Write writes p at the current offset, skipping all-zero blocks; it
// always reports len(p) on success.
func (w *holeWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		// Split at block boundaries of the file, and gather a run of
		// blocks that are not all zeros into one pwrite.
		start, run := w.off, 0
		for run < len(p) {
			end := min(len(p), run+holeBlock-int((w.off+int64(run))%holeBlock))
			if bytes.Equal(p[run:end], zeroBlock[:end-run]) {
				break
			}
			run = end
		}
		if run > 0 {
			if _, err := w.f.WriteAt(p[:run], start); err != nil {
				return 0, err
			}
			p, w.off = p[run:], w.off+int64(run)
			continue
		}
		// p starts with an all-zero block: skip it.
		end := min(len(p), holeBlock-int(w.off%holeBlock))
		p, w.off = p[end:], w.off+int64(end)
	}
	return n, nil
}

// finish gives the file its size (a hole at the end is never written).
func (w *holeWriter) finish(size int64) error {
	if err := unix.Ftruncate(w.f.fd, size); err != nil {
		return fmt.Errorf("truncate to %d bytes: %w", size, err)
	}
	return nil
}
