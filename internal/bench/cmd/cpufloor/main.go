// SPDX-License-Identifier: Apache-2.0

// Command cpufloor measures, for scripts/race.sh, the CPU a cold install of
// an image cannot avoid: each layer's inflate with the installer's own
// inflater (klauspost/compress/gzip, as installer/unpack.go uses), and the
// three sha256 streams an install computes (the compressed blob, the
// uncompressed tar stream for its diff_id, the content of every regular
// file for files.json).
//
//	layerblobs LAYOUT OS/ARCH | cpufloor
//
// It reads layerblobs' lines (media type, a tab, the blob's path) on stdin
// and prints one line per layer and a total line, each with the CPU seconds
// of its thread (user + sys, CLOCK_THREAD_CPUTIME_ID; the work runs on one
// locked OS thread) per part:
//
//	layer N inflate S blob S diffid S files S mib M
//
// then "largest S" (the inflate of the slowest layer: no install can run a
// gzip stream's inflate on more than one core) and "cpu S" (the sum of every
// part). Tar parsing, file creation and the rest are not counted: these are
// floors. Layers that are neither gzip nor plain tar are refused.
package main

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"
)

func main() {
	runtime.LockOSThread()
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "cpufloor: %v\n", err)
		os.Exit(1)
	}
}

// cost is one layer's CPU time per part.
type cost struct{ inflate, blob, diffid, files time.Duration }

func (c cost) sum() time.Duration { return c.inflate + c.blob + c.diffid + c.files }

func run(stdin io.Reader, stdout io.Writer) error {
	var total cost
	var largest time.Duration
	sc := bufio.NewScanner(stdin)
	n := 0
	for sc.Scan() {
		mediaType, path, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			return fmt.Errorf("read line %q: want media type, tab, path", sc.Text())
		}
		c, size, err := layer(mediaType, path)
		if err != nil {
			return fmt.Errorf("layer %d: %w", n, err)
		}
		fmt.Fprintf(stdout, "layer %d inflate %.3f blob %.3f diffid %.3f files %.3f mib %d\n",
			n, c.inflate.Seconds(), c.blob.Seconds(), c.diffid.Seconds(), c.files.Seconds(), size>>20)
		total = cost{total.inflate + c.inflate, total.blob + c.blob, total.diffid + c.diffid, total.files + c.files}
		largest = max(largest, c.inflate)
		n++
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if n == 0 {
		return errors.New("no layers on stdin")
	}
	fmt.Fprintf(stdout, "total inflate %.3f blob %.3f diffid %.3f files %.3f\nlargest %.3f\ncpu %.3f\n",
		total.inflate.Seconds(), total.blob.Seconds(), total.diffid.Seconds(), total.files.Seconds(),
		largest.Seconds(), total.sum().Seconds())
	return nil
}

// threadCPU is the calling thread's CPU time (user + sys).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err) // Linux has had this clock since 2.6.12
	}
	return time.Duration(ts.Nano())
}

// timed adds the thread CPU time of f to *d.
func timed(d *time.Duration, f func()) {
	t := threadCPU()
	f()
	*d += threadCPU() - t
}

// layer measures one blob: its sha256, then its inflate, the diff_id hash
// of the stream and the hash of each regular file's content. It returns the
// uncompressed size. Blobs are read through reused buffers, as an install
// reads them (pages touched for the first time cost several times more on
// these VMs), and the reads' own CPU is left out.
func layer(mediaType, path string) (cost, int64, error) {
	var c cost
	buf := make([]byte, 1<<20)
	if err := hashBlob(path, buf, &c.blob); err != nil {
		return c, 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return c, 0, err
	}
	defer f.Close()
	blob := &untimed{r: bufio.NewReaderSize(f, 1<<20)}
	var src io.Reader = blob
	switch {
	case strings.HasSuffix(mediaType, "+gzip") || strings.HasSuffix(mediaType, ".gzip"):
		zr, err := gzip.NewReader(blob)
		if err != nil {
			return c, 0, fmt.Errorf("open gzip %s: %w", path, err)
		}
		src = zr
	case strings.HasSuffix(mediaType, ".tar"):
	default:
		return c, 0, fmt.Errorf("media type %s: want gzip or plain tar", mediaType)
	}
	s := &stream{r: src, blob: blob, h: sha256.New(), c: &c}
	// tar reads through a large buffer so that the clocks run once per
	// fill, not once per 512-byte header.
	tr := tar.NewReader(bufio.NewReaderSize(s, 1<<20))
	fh := sha256.New()
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return c, 0, fmt.Errorf("read tar %s: %w", path, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		fh.Reset()
		if err := hashFile(tr, fh, buf, &c.files); err != nil {
			return c, 0, fmt.Errorf("read %s in %s: %w", hdr.Name, path, err)
		}
	}
	// The rest of the stream (tar's end blocks, padding) is in the diff_id.
	if _, err := io.CopyBuffer(io.Discard, s, buf); err != nil {
		return c, 0, err
	}
	return c, s.n, nil
}

// hashBlob hashes the file at path through buf, adding the hash's CPU time
// (not the reads') to *d.
func hashBlob(path string, buf []byte, d *time.Duration) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return hashFile(f, sha256.New(), buf, d)
}

// untimed is the compressed blob: it counts the CPU time of its reads so
// that the inflate's clock can leave them out.
type untimed struct {
	r   io.Reader
	cpu time.Duration
}

func (u *untimed) Read(p []byte) (n int, err error) {
	timed(&u.cpu, func() { n, err = u.r.Read(p) })
	return n, err
}

// hashFile hashes r's content into h, adding the hash's CPU time to *d.
func hashFile(r io.Reader, h hash.Hash, buf []byte, d *time.Duration) error {
	for {
		n, err := r.Read(buf)
		if n > 0 {
			timed(d, func() { h.Write(buf[:n]) })
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// stream is the uncompressed tar stream: its reads are timed as inflate,
// its bytes hashed (timed as diffid) and counted.
type stream struct {
	r    io.Reader
	blob *untimed
	h    hash.Hash
	c    *cost
	n    int64
}

func (s *stream) Read(p []byte) (int, error) {
	var n int
	var err error
	before := s.blob.cpu
	timed(&s.c.inflate, func() { n, err = s.r.Read(p) })
	s.c.inflate -= s.blob.cpu - before
	timed(&s.c.diffid, func() { s.h.Write(p[:n]) })
	s.n += int64(n)
	return n, err
}
