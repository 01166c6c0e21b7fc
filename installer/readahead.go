package installer

import "io"

// Read-ahead shape: aheadChunks buffers of aheadChunk bytes (4 MiB),
// allocated once per install and reused from layer to layer, so memory does
// not grow with the number or size of layers. A buffer is handed to the
// extractor only once full (or at the stream's end), so chunks are small:
// while a slow download is followed, what has been inflated waits at most
// one chunk for more input before the extractor sees it.
const (
	aheadChunk  = 64 << 10
	aheadChunks = 64
)

// readAhead reads a stream (a decompressor) on its own goroutine into a
// fixed ring of buffers, so inflating overlaps the extractor's file writes.
// One stream at a time: start the next only after the previous one was read
// to its end (Read returned an error).
type readAhead struct {
	free chan []byte
	full chan chunk
	done chan struct{} // closed when the current stream's producer returned
	stop chan struct{} // closed by abort
	cur  chunk
	have bool // cur came from full and has not gone back to free
}

// chunk is one filled buffer: b is what is left to read of buf, err what
// followed it (the stream's end or failure), or nil.
type chunk struct {
	buf, b []byte
	err    error
}

func newReadAhead() *readAhead {
	ra := &readAhead{free: make(chan []byte, aheadChunks), full: make(chan chunk, aheadChunks)}
	for range aheadChunks {
		ra.free <- make([]byte, aheadChunk)
	}
	return ra
}

// start begins reading src ahead. It waits for the previous stream's
// producer, which has returned once that stream was read to its end.
func (ra *readAhead) start(src io.Reader) {
	if ra.done != nil {
		<-ra.done
	}
	if ra.have {
		ra.free <- ra.cur.buf
		ra.have = false
	}
	ra.done, ra.stop = make(chan struct{}), make(chan struct{})
	go ra.produce(src, ra.stop, ra.done)
}

// produce fills free buffers from src until src fails or ends. A send on
// full never blocks: it holds as many slots as there are buffers.
func (ra *readAhead) produce(src io.Reader, stop, done chan struct{}) {
	defer close(done)
	for {
		var buf []byte
		select {
		case buf = <-ra.free:
		case <-stop:
			return
		}
		n := 0
		var err error
		for n < len(buf) && err == nil {
			var m int
			m, err = src.Read(buf[n:])
			n += m
		}
		ra.full <- chunk{buf: buf, b: buf[:n], err: err}
		if err != nil {
			return
		}
	}
}

// Read returns what the producer has read, in order, then its error
// (io.EOF at the stream's end).
func (ra *readAhead) Read(p []byte) (int, error) {
	for {
		if ra.have {
			if len(ra.cur.b) > 0 {
				n := copy(p, ra.cur.b)
				ra.cur.b = ra.cur.b[n:]
				return n, nil
			}
			if ra.cur.err != nil {
				return 0, ra.cur.err
			}
			ra.free <- ra.cur.buf
			ra.have = false
		}
		ra.cur, ra.have = <-ra.full, true
	}
}

// wait returns once the current stream's producer has returned.
func (ra *readAhead) wait() {
	if ra.done != nil {
		<-ra.done
	}
}

// abort tells the producer to stop at its next buffer; a read it is blocked
// in ends with its source (the install closes the blob feeds on its way
// out). The readAhead must not be started again.
func (ra *readAhead) abort() {
	if ra.stop != nil {
		select {
		case <-ra.stop:
		default:
			close(ra.stop)
		}
	}
}
