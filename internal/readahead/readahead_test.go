package readahead

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
)

// The ring of the tests: the installer's shape (64 buffers of 64 KiB).
const (
	testChunk  = 64 << 10
	testChunks = 64
)

// TestReadAhead: streams of every size relative to the ring (empty, one
// byte, exactly a chunk, more than the ring) come through whole and in
// order, one after another on the same buffers; a source's error arrives
// after the bytes read before it.
func TestReadAhead(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	stream := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	boom := errors.New("inflate: corrupt input")
	cases := []struct {
		name string
		data []byte
		src  func([]byte) io.Reader
		want error // from ReadAll
	}{
		{"empty", nil, func(b []byte) io.Reader { return bytes.NewReader(b) }, nil},
		{"one byte", stream(1), func(b []byte) io.Reader { return bytes.NewReader(b) }, nil},
		{"one testChunk", stream(testChunk), func(b []byte) io.Reader { return bytes.NewReader(b) }, nil},
		{"more than the ring", stream(testChunk*testChunks*2 + 12345), func(b []byte) io.Reader { return bytes.NewReader(b) }, nil},
		{"one byte a read", stream(3 * testChunk / 2), func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) }, nil},
		{"source fails mid-testChunk", stream(testChunk + 77), func(b []byte) io.Reader {
			return io.MultiReader(bytes.NewReader(b), iotest.ErrReader(boom))
		}, boom},
		{"data and EOF together", stream(5000), func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) }, nil},
	}
	ra := New(testChunks, testChunk)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ra.Start(c.src(c.data))
			got, err := io.ReadAll(ra)
			if !errors.Is(err, c.want) {
				t.Fatalf("ReadAll() error = %v, want %v", err, c.want)
			}
			if !bytes.Equal(got, c.data) {
				t.Fatalf("ReadAll() = %d bytes (equal %v), want the %d of the source", len(got), bytes.Equal(got, c.data), len(c.data))
			}
			// Reading past the end keeps returning the end.
			if n, err := ra.Read(make([]byte, 8)); n != 0 || (c.want == nil && err != io.EOF) {
				t.Errorf("Read() after the end = %d, %v; want 0, the end", n, err)
			}
		})
	}
}

// TestReadAheadAbort: Abort stops a producer that is waiting for a free
// buffer; the consumer never read, so every buffer is taken.
func TestReadAheadAbort(t *testing.T) {
	ra := New(testChunks, testChunk)
	ra.Start(bytes.NewReader(make([]byte, testChunk*(testChunks+2))))
	ra.Abort()
	ra.Wait()  // the producer returned
	ra.Abort() // twice is harmless
}

// TestReadAheadBigBlocks: backup's shape (a few 1 MiB blocks) passes a
// stream of several blocks whole and ends with io.EOF.
func TestReadAheadBigBlocks(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), (5<<20)/16+3)
	ra := New(5, 1<<20)
	ra.Start(iotest.HalfReader(bytes.NewReader(data)))
	got, err := io.ReadAll(ra)
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("ReadAll() = %d bytes, %v; want the %d of the source", len(got), err, len(data))
	}
}
