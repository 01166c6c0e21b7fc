package extract

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
)

// hashInBackground is the largest file (bytes) whose content is read whole
// and hashed on the hasher's goroutine, off the extraction path; larger
// files are hashed inline as they stream. With 16 queued jobs at most,
// about 4.5 MiB of content is held at once.
const hashInBackground = 256 << 10

// hasher computes and keeps the sha256 of files by inode number on one
// worker goroutine. Jobs are applied in submission order, so when an inode
// number is reused after a removal the newer file's hash wins.
type hasher struct {
	mu      sync.Mutex
	hashes  map[uint64]string
	jobs    chan hashJob
	pending sync.WaitGroup
	pool    sync.Pool
	started bool
}

type hashJob struct {
	ino uint64
	buf []byte // content to hash, returned to the pool after
	sum string // or a hash already computed
}

func newHasher() *hasher {
	return &hasher{hashes: map[uint64]string{}, pool: sync.Pool{New: func() any {
		b := make([]byte, hashInBackground)
		return &b
	}}}
}

func (h *hasher) start() {
	if h.started {
		return
	}
	h.started = true
	h.jobs = make(chan hashJob, 16)
	go func() {
		for j := range h.jobs {
			sum := j.sum
			if j.buf != nil {
				s := sha256.Sum256(j.buf)
				sum = hex.EncodeToString(s[:])
				b := j.buf[:cap(j.buf)]
				h.pool.Put(&b)
			}
			h.mu.Lock()
			h.hashes[j.ino] = sum
			h.mu.Unlock()
			h.pending.Done()
		}
	}()
}

// buffer returns a slice of length n (at most hashInBackground) to fill
// with a file's content and then pass to submit.
func (h *hasher) buffer(n int) []byte {
	b := h.pool.Get().(*[]byte)
	return (*b)[:n]
}

// submit queues content read into a buffer from buffer().
func (h *hasher) submit(ino uint64, buf []byte) {
	h.start()
	h.pending.Add(1)
	h.jobs <- hashJob{ino: ino, buf: buf}
}

// set records a hash computed inline, in order with queued jobs.
func (h *hasher) set(ino uint64, sum string) {
	h.start()
	h.pending.Add(1)
	h.jobs <- hashJob{ino: ino, sum: sum}
}

// get waits for queued jobs, then returns the hash of ino.
func (h *hasher) get(ino uint64) (string, bool) {
	h.pending.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.hashes[ino]
	return s, ok
}

// close stops the worker once the queue is drained.
func (h *hasher) close() {
	if h.started {
		close(h.jobs)
		h.started = false
	}
}
