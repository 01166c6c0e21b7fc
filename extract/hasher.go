package extract

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
)

// hashInBackground is the largest file (bytes) whose content is read whole
// and hashed on the hasher's goroutine, off the extraction path; larger
// files are hashed inline as they stream.
const hashInBackground = 256 << 10

// hashQueue is how many small files may wait to be hashed. With one being
// filled and one being hashed, hashBuffers buffers of hashInBackground
// bytes (4.5 MiB) exist at most, allocated on first use and reused.
const (
	hashQueue   = 16
	hashBuffers = hashQueue + 2
)

// hasher computes and keeps the sha256 of files by inode number on one
// worker goroutine. Jobs are applied in submission order, so when an inode
// number is reused after a removal the newer file's hash wins. The hashes
// go to a hashStore: with a spill directory, sorted runs on disk and 8
// bytes per 102 files in memory; without, 40 bytes per file in memory.
type hasher struct {
	mu      sync.Mutex
	store   *hashStore
	jobs    chan hashJob
	free    chan []byte // buffers back from the worker
	made    int         // buffers allocated so far, at most hashBuffers
	pending sync.WaitGroup
	started bool
}

type hashJob struct {
	ino uint64
	buf []byte // content to hash, returned to free after
	sum [sha256.Size]byte
}

func newHasher(spillDir string) *hasher {
	return &hasher{store: newHashStore(spillDir), free: make(chan []byte, hashBuffers)}
}

func (h *hasher) start() {
	if h.started {
		return
	}
	h.started = true
	h.jobs = make(chan hashJob, hashQueue)
	go func() {
		for j := range h.jobs {
			sum := j.sum
			if j.buf != nil {
				sum = sha256.Sum256(j.buf)
				h.free <- j.buf[:cap(j.buf)]
			}
			h.mu.Lock()
			h.store.add(j.ino, sum)
			h.mu.Unlock()
			h.pending.Done()
		}
	}()
}

// buffer returns a slice of length n (at most hashInBackground) to fill
// with a file's content and then pass to submit. It waits for the worker
// when every buffer is in use.
func (h *hasher) buffer(n int) []byte {
	select {
	case b := <-h.free:
		return b[:n]
	default:
	}
	if h.made < hashBuffers {
		h.made++
		return make([]byte, hashInBackground)[:n]
	}
	return (<-h.free)[:n]
}

// release returns a buffer from buffer() that will not be submitted.
func (h *hasher) release(buf []byte) {
	h.free <- buf[:cap(buf)]
}

// submit queues content read into a buffer from buffer().
func (h *hasher) submit(ino uint64, buf []byte) {
	h.start()
	h.pending.Add(1)
	h.jobs <- hashJob{ino: ino, buf: buf}
}

// set records a hash computed inline, in order with queued jobs.
func (h *hasher) set(ino uint64, sum []byte) {
	h.start()
	h.pending.Add(1)
	j := hashJob{ino: ino}
	copy(j.sum[:], sum)
	h.jobs <- j
}

// get waits for queued jobs, then returns the hex sha256 of ino.
func (h *hasher) get(ino uint64) (string, bool) {
	h.pending.Wait()
	h.mu.Lock()
	s, ok := h.store.get(ino)
	h.mu.Unlock()
	if !ok {
		return "", false
	}
	return hex.EncodeToString(s[:]), true
}

// close stops the worker once the queue is drained and frees the store.
func (h *hasher) close() {
	if h.started {
		h.pending.Wait()
		close(h.jobs)
		h.started = false
	}
	h.mu.Lock()
	h.store.close()
	h.mu.Unlock()
}

// FileHash returns the sha256 (hex) of the regular file with inode number
// ino as this Applier wrote it, when Options.HashFiles is set; false also
// when the spill file failed (the caller hashes the file itself). It is meant
// for listing a finished tree without reading it again (release.Scan).
func (a *Applier) FileHash(ino uint64) (string, bool) {
	h, ok := a.hasher.get(ino)
	return h, ok
}

// SetFileHash records sum as the sha256 of the regular file with inode
// number ino, for a file the caller placed under the root itself before
// applying layers (a tree seeded with hard links to files whose hashes
// are recorded), so FileHash answers for it without reading it. A file a
// later layer writes at that name gets a new inode and its own hash.
func (a *Applier) SetFileHash(ino uint64, sum [sha256.Size]byte) {
	a.hasher.set(ino, sum[:])
}
