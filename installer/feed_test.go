package installer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
)

// feedFile starts a feed on a fresh file and returns the writing handle.
func feedFile(t *testing.T) (*feed, *os.File) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "blob")
	w, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	fd := newFeed()
	t.Cleanup(fd.close)
	fd.open(r, 0)
	return fd, w
}

// readAsync reads all of r on a goroutine.
func readAsync(r io.Reader) <-chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		b, err := io.ReadAll(r)
		ch <- readResult{b, err}
	}()
	return ch
}

type readResult struct {
	b   []byte
	err error
}

// TestFeedFollowsWriter: a reader gets exactly the bytes written, in
// order, however the writes are cut, and io.EOF only after finish(nil).
func TestFeedFollowsWriter(t *testing.T) {
	fd, w := feedFile(t)
	want := make([]byte, 1<<20)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(rnd.Uint32())
	}
	got := readAsync(fd.reader(context.Background()))
	for off := 0; off < len(want); {
		n := min(1+rnd.IntN(64<<10), len(want)-off)
		if _, err := w.Write(want[off : off+n]); err != nil {
			t.Fatal(err)
		}
		fd.grow(n)
		off += n
	}
	select {
	case r := <-got:
		t.Fatalf("reader ended before finish: %d bytes, %v", len(r.b), r.err)
	case <-time.After(50 * time.Millisecond):
	}
	fd.finish(true, nil)
	r := <-got
	if r.err != nil || !bytes.Equal(r.b, want) {
		t.Fatalf("ReadAll() = %d bytes (equal %v), %v; want the %d written bytes", len(r.b), bytes.Equal(r.b, want), r.err, len(want))
	}
}

// TestFeedEnds: how a waiting reader ends when the download fails, the
// install gives up on it, or its context ends.
func TestFeedEnds(t *testing.T) {
	boom := errors.New("registry said no")
	cases := []struct {
		name string
		end  func(fd *feed, cancel context.CancelFunc)
		want error
	}{
		{"download fails", func(fd *feed, _ context.CancelFunc) { fd.finish(false, boom) }, boom},
		{"feed abandoned", func(fd *feed, _ context.CancelFunc) { fd.close() }, errFeedAbandoned},
		{"context cancelled", func(_ *feed, cancel context.CancelFunc) { cancel() }, context.Canceled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fd, w := feedFile(t)
			if _, err := w.WriteString("partial"); err != nil {
				t.Fatal(err)
			}
			fd.grow(len("partial"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			got := readAsync(fd.reader(ctx))
			time.Sleep(20 * time.Millisecond) // let the reader wait for more
			c.end(fd, cancel)
			select {
			case r := <-got:
				if string(r.b) != "partial" || !errors.Is(r.err, c.want) {
					t.Errorf("ReadAll() = %q, %v; want %q, %v", r.b, r.err, "partial", c.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("reader still waiting 5s after the feed ended")
			}
		})
	}
}

// TestFeedNotOpened: a reader may start before the download has created
// the blob file; a feed finished before it opened closes what it is given.
func TestFeedNotOpened(t *testing.T) {
	fd := newFeed()
	got := readAsync(fd.reader(context.Background()))
	p := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(p, []byte("whole"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	fd.open(f, 5)
	fd.finish(false, nil)
	if r := <-got; string(r.b) != "whole" || r.err != nil {
		t.Errorf("ReadAll() = %q, %v; want %q, nil", r.b, r.err, "whole")
	}
	fd.close()

	late := newFeed()
	late.finish(false, errFeedAbandoned)
	f2, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	late.open(f2, 5)
	if err := f2.Close(); err == nil {
		t.Error("open() on a finished feed kept the handle open")
	}
}

// TestFeedStored: a stored blob's reader hands on its bytes and ends with
// io.EOF when they hash to the digest; with a *storedBlobError
// (ErrDigestMismatch) at the end when they do not, never io.EOF.
func TestFeedStored(t *testing.T) {
	want := bytes.Repeat([]byte("stored blob "), 100_000)
	for _, tc := range []struct {
		name    string
		content []byte
		ok      bool
	}{
		{"intact", want, true},
		{"one byte changed", append(append([]byte(nil), want[:len(want)-1]...), '!'), false},
		{"shorter on disk", want[:len(want)/2], false},
	} {
		p := filepath.Join(t.TempDir(), "blob")
		if err := os.WriteFile(p, tc.content, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		fd := newFeed()
		fd.openStored(f, int64(len(want)), digest.FromBytes(want))
		got, err := io.ReadAll(fd.reader(context.Background()))
		var sb *storedBlobError
		switch {
		case tc.ok && (err != nil || !bytes.Equal(got, want)):
			t.Errorf("%s: ReadAll() = %d bytes, %v; want the blob", tc.name, len(got), err)
		case !tc.ok && (!errors.As(err, &sb) || !errors.Is(err, ErrDigestMismatch)):
			t.Errorf("%s: ReadAll() = %d bytes, %v; want a stored blob digest mismatch", tc.name, len(got), err)
		}
		if ferr := fd.failure(); (ferr == nil) != tc.ok {
			t.Errorf("%s: feed finished with %v", tc.name, ferr)
		}
		fd.close()
	}
}
