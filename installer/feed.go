package installer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	digest "github.com/opencontainers/go-digest"
)

// errFeedAbandoned: the install stopped waiting for a blob.
var errFeedAbandoned = errors.New("blob download abandoned")

// feed is one layer blob on its way into the cache, readable while it is
// written: extraction follows the download instead of waiting for its end,
// so fetching, inflating and file creation overlap even within one layer.
//
// The writer (the fetch goroutine) calls open once the blob file exists,
// grow after each write, and finish once: with nil when the blob is complete
// and verified under its final name, or with the download's failure. A
// reader sees only bytes already written; it gets io.EOF only after a
// finish(nil), and the writer's error after a failed finish, so a layer is
// never taken as complete before its blob's digest was checked.
//
// A blob found in the store is opened with openStored instead: it is read
// once, by the feed's one reader, which hashes the bytes as it hands them
// on and finishes the feed itself at the blob's end: with nil when they
// hash to the digest, else with a *storedBlobError. So a reused blob is
// checked without a read of its own, and its layer still never ends on
// unverified bytes.
type feed struct {
	mu      sync.Mutex
	changed *sync.Cond
	f       *os.File // read handle on the blob file; nil until open
	written int64    // bytes of f that are written
	done    bool
	err     error // set with done when the download failed
	fetched bool  // the blob was downloaded, not found in the cache

	stored   digest.Digest   // set by openStored: the blob came from the store
	verifier digest.Verifier // hashes a stored blob's bytes as the reader gets them
}

// storedBlobError: a blob reused from the store did not hash to its
// digest (or was shorter than its size) when extraction read it. It
// unwraps to ErrDigestMismatch. The install removes the blob and runs
// again, fetching it (installFresh).
type storedBlobError struct {
	digest digest.Digest
	err    error
}

func (e *storedBlobError) Error() string { return fmt.Sprintf("stored blob %s: %v", e.digest, e.err) }
func (e *storedBlobError) Unwrap() error { return e.err }

func newFeed() *feed {
	fd := &feed{}
	fd.changed = sync.NewCond(&fd.mu)
	return fd
}

// open gives the feed a read handle on the blob file, which already holds
// written bytes. The feed owns f from here on.
func (fd *feed) open(f *os.File, written int64) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if fd.done { // abandoned before the download began
		f.Close()
		return
	}
	fd.f, fd.written = f, written
	fd.changed.Broadcast()
}

// openStored gives the feed a read handle on the complete stored blob d of
// size bytes, to be verified as it is read. The feed owns f from here on.
func (fd *feed) openStored(f *os.File, size int64, d digest.Digest) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if fd.done {
		f.Close()
		return
	}
	fd.f, fd.written, fd.stored, fd.verifier = f, size, d, d.Verifier()
	fd.changed.Broadcast()
}

// state says whether the feed's blob came from the store (its digest,
// else "") and whether the feed has finished.
func (fd *feed) state() (stored digest.Digest, done bool) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	return fd.stored, fd.done
}

// grow records n more bytes written to the blob file.
func (fd *feed) grow(n int) {
	fd.mu.Lock()
	fd.written += int64(n)
	fd.mu.Unlock()
	fd.changed.Broadcast()
}

// downloaded says whether the blob was downloaded (finished by the
// fetcher), not found in the store. Its reader may finish a stored blob's
// feed at any time, so the fetcher asks under the lock.
func (fd *feed) downloaded() bool {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	return fd.fetched
}

// finish ends the feed: err nil means the blob is complete and verified.
// Only the first call counts.
func (fd *feed) finish(fetched bool, err error) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if fd.done {
		return
	}
	fd.done, fd.err, fd.fetched = true, err, fetched
	fd.changed.Broadcast()
}

// close releases the read handle; a reader still waiting gets
// errFeedAbandoned.
func (fd *feed) close() {
	fd.finish(false, errFeedAbandoned)
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if fd.f != nil {
		fd.f.Close()
		fd.f = nil
	}
}

// wait returns once the feed has finished, with the download's error (nil:
// the blob is complete and verified), or ctx's error if ctx ends first.
func (fd *feed) wait(ctx context.Context) error {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if err := fd.await(ctx, func() bool { return false }); err != nil {
		return err
	}
	return fd.err
}

// await blocks, with fd.mu held, until the feed has finished or ready
// reports true, or returns ctx's error if ctx ends first.
func (fd *feed) await(ctx context.Context, ready func() bool) error {
	for !fd.done && !ready() {
		if err := ctx.Err(); err != nil {
			return err
		}
		stop := context.AfterFunc(ctx, func() {
			fd.mu.Lock()
			defer fd.mu.Unlock()
			fd.changed.Broadcast()
		})
		fd.changed.Wait()
		stop()
	}
	return nil
}

// failure is the download's error once the feed has finished, else nil.
func (fd *feed) failure() error {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if fd.done {
		return fd.err
	}
	return nil
}

// reader returns a reader of the blob from its first byte, which blocks
// for bytes not yet written and gives up when ctx ends. A feed has one
// reader: a stored blob's is the one that hashes it.
func (fd *feed) reader(ctx context.Context) *feedReader {
	return &feedReader{fd: fd, ctx: ctx}
}

type feedReader struct {
	fd  *feed
	ctx context.Context
	off int64
}

func (r *feedReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil { // an interrupted install stops here, cached blob or not
		return 0, err
	}
	fd := r.fd
	fd.mu.Lock()
	if err := fd.await(r.ctx, func() bool { return fd.f != nil && (r.off < fd.written || fd.stored != "") }); err != nil {
		fd.mu.Unlock()
		return 0, err
	}
	f, size, err, done, v := fd.f, fd.written, fd.err, fd.done, fd.verifier
	fd.mu.Unlock()
	avail := size - r.off
	if f == nil || avail <= 0 {
		switch {
		case err != nil:
			return 0, err
		case v != nil && !done:
			return 0, r.endStored()
		}
		return 0, io.EOF
	}
	if int64(len(p)) > avail {
		p = p[:avail]
	}
	n, rerr := f.ReadAt(p, r.off)
	r.off += int64(n)
	if v != nil {
		v.Write(p[:n]) // a hash's Write never fails
	}
	if n > 0 && rerr == io.EOF {
		rerr = nil
	}
	if rerr == io.EOF { // written bytes must be readable
		if v != nil { // the stored file shrank after it was opened
			return n, r.failStored(fmt.Errorf("%w: %d bytes, its size is %d", ErrDigestMismatch, r.off, size))
		}
		rerr = io.ErrUnexpectedEOF
	}
	return n, rerr
}

// endStored finishes a stored blob's feed once all of its bytes were read:
// io.EOF when they hash to its digest, else a *storedBlobError.
func (r *feedReader) endStored() error {
	if !r.fd.verifier.Verified() {
		return r.failStored(fmt.Errorf("%w: content does not hash to its name", ErrDigestMismatch))
	}
	r.fd.finish(false, nil)
	if err := r.fd.failure(); err != nil { // abandoned meanwhile
		return err
	}
	return io.EOF
}

// failStored finishes a stored blob's feed with cause and returns the
// feed's error.
func (r *feedReader) failStored(cause error) error {
	r.fd.finish(false, &storedBlobError{digest: r.fd.stored, err: cause})
	return r.fd.failure()
}
