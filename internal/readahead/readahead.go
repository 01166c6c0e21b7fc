package readahead

import "io"

// Reader is a read-ahead ring; see the package doc.
type Reader struct {
	free chan []byte
	full chan chunk
	done chan struct{} // closed when the current stream's producer returned
	stop chan struct{} // closed by Abort
	cur  chunk
	have bool // cur came from full and has not gone back to free
}

// chunk is one filled buffer: b is what is left to read of buf, err what
// followed it (the stream's end or failure), or nil.
type chunk struct {
	buf, b []byte
	err    error
}

// New returns a Reader with n buffers of size bytes (n, size >= 1),
// allocated now and reused for every stream.
func New(n, size int) *Reader {
	ra := &Reader{free: make(chan []byte, n), full: make(chan chunk, n)}
	for range n {
		ra.free <- make([]byte, size)
	}
	return ra
}

// Start begins reading src ahead. It waits for the previous stream's
// producer, which has returned once that stream was read to its end.
func (ra *Reader) Start(src io.Reader) {
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
func (ra *Reader) produce(src io.Reader, stop, done chan struct{}) {
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
// (io.EOF at the stream's end), again on every later call.
func (ra *Reader) Read(p []byte) (int, error) {
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

// Wait returns once the current stream's producer has returned.
func (ra *Reader) Wait() {
	if ra.done != nil {
		<-ra.done
	}
}

// Abort tells the producer to stop at its next buffer; a read it is
// blocked in ends with its source (the caller closes it). The Reader must
// not be read or started again. Abort may be called more than once.
func (ra *Reader) Abort() {
	if ra.stop != nil {
		select {
		case <-ra.stop:
		default:
			close(ra.stop)
		}
	}
}
