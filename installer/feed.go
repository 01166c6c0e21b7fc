package installer

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
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
type feed struct {
	mu      sync.Mutex
	changed *sync.Cond
	f       *os.File // read handle on the blob file; nil until open
	written int64    // bytes of f that are written
	done    bool
	err     error // set with done when the download failed
	fetched bool  // the blob was downloaded, not found in the cache
}

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

// grow records n more bytes written to the blob file.
func (fd *feed) grow(n int) {
	fd.mu.Lock()
	fd.written += int64(n)
	fd.mu.Unlock()
	fd.changed.Broadcast()
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
// for bytes not yet written and gives up when ctx ends.
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
	if err := fd.await(r.ctx, func() bool { return fd.f != nil && r.off < fd.written }); err != nil {
		fd.mu.Unlock()
		return 0, err
	}
	f, avail, err := fd.f, fd.written-r.off, fd.err
	fd.mu.Unlock()
	if f == nil || avail <= 0 {
		if err != nil {
			return 0, err
		}
		return 0, io.EOF
	}
	if int64(len(p)) > avail {
		p = p[:avail]
	}
	n, rerr := f.ReadAt(p, r.off)
	r.off += int64(n)
	if n > 0 && rerr == io.EOF {
		rerr = nil
	}
	if rerr == io.EOF { // written bytes must be readable
		rerr = io.ErrUnexpectedEOF
	}
	return n, rerr
}
