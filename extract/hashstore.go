package extract

import (
	"bufio"
	"cmp"
	"container/heap"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
)

// hashRec is one file's sha256 by inode number.
type hashRec struct {
	ino uint64
	sum [sha256.Size]byte
}

// recSize is a hashRec on disk: ino (8 bytes, big-endian) and the sum.
const recSize = 8 + sha256.Size

// Spill shape: runRecs records (2.5 MiB) are kept in memory and sorted;
// past that they go to the spill file as a sorted run. Finished, the runs
// are merged into one sorted run read back a page of pageRecs records
// (4,080 bytes) at a time, with the first inode of each page in memory: 8
// bytes per 102 files.
const (
	runRecs  = 64 << 10
	pageRecs = 4080 / recSize
)

// hashStore keeps file hashes by inode with memory that does not grow
// with the number of files once it spills: when dir is set, each full
// buffer of runRecs records is sorted and written to an unlinked file in
// dir (gone when closed, also after kill -9). Without dir everything stays
// in memory (40 bytes and a slice slot per file). Not safe for concurrent
// use.
type hashStore struct {
	dir  string
	buf  []hashRec // unsorted, in arrival order
	file *os.File  // the spill file, nil until the first run
	runs []run     // sorted runs in the spill file, oldest first
	end  int64     // bytes written to the spill file

	// once finished: the sorted, deduplicated records, in memory (mem)
	// or in the spill file from merged.off, with the first inode of each
	// page in index.
	finished bool
	mem      []hashRec
	merged   run
	index    []uint64
	pages    [2]page // the two pages last read: a release's listing and its layer state's read at once
	older    int     // the one of pages the next read replaces (least recently used)
	reads    int     // pages read back so far
	err      error   // the first spill error: lookups then miss
}

type run struct{ off, n int64 }

// page is one page of the merged run as read back.
type page struct {
	at   int // its number, -1 for none
	recs []hashRec
}

func newHashStore(dir string) *hashStore {
	return &hashStore{dir: dir, pages: [2]page{{at: -1}, {at: -1}}}
}

// add records sum for ino; a later add for the same inode wins.
func (s *hashStore) add(ino uint64, sum [sha256.Size]byte) {
	if s.finished {
		s.reopen()
	}
	s.buf = append(s.buf, hashRec{ino: ino, sum: sum})
	if len(s.buf) >= runRecs && s.dir != "" && s.err == nil {
		s.err = s.spill()
	}
}

// sortDedup sorts recs by inode, keeping the last of each inode.
func sortDedup(recs []hashRec) []hashRec {
	slices.SortStableFunc(recs, func(a, b hashRec) int { return cmp.Compare(a.ino, b.ino) })
	out := recs[:0]
	for i, r := range recs {
		if i+1 < len(recs) && recs[i+1].ino == r.ino {
			continue
		}
		out = append(out, r)
	}
	return out
}

// spill writes the buffer as a sorted run.
func (s *hashStore) spill() error {
	if s.file == nil {
		f, err := os.CreateTemp(s.dir, ".hashes-")
		if err != nil {
			return fmt.Errorf("create hash spill file: %w", err)
		}
		os.Remove(f.Name()) // unlinked: nothing to clean up, whatever happens
		s.file = f
	}
	recs := sortDedup(s.buf)
	if err := s.writeRun(recs); err != nil {
		return err
	}
	s.buf = s.buf[:0]
	return nil
}

func (s *hashStore) writeRun(recs []hashRec) error {
	w := bufio.NewWriterSize(io.NewOffsetWriter(s.file, s.end), 64<<10)
	var b [recSize]byte
	for _, r := range recs {
		binary.BigEndian.PutUint64(b[:8], r.ino)
		copy(b[8:], r.sum[:])
		w.Write(b[:])
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write hash spill file: %w", err)
	}
	s.runs = append(s.runs, run{off: s.end, n: int64(len(recs))})
	s.end += int64(len(recs)) * recSize
	return nil
}

// reopen turns a finished store back into one that takes records: the
// merged run becomes its first run.
func (s *hashStore) reopen() {
	s.finished = false
	if s.file != nil {
		s.runs = []run{s.merged}
	} else {
		s.buf = append(s.mem, s.buf...)
		s.mem = nil
	}
	s.index, s.pages, s.older = nil, [2]page{{at: -1}, {at: -1}}, 0
}

// finish sorts what is in memory, or merges the runs into one.
func (s *hashStore) finish() {
	s.finished = true
	if s.file == nil || s.err != nil {
		s.mem = sortDedup(s.buf)
		s.buf = nil
		return
	}
	if len(s.buf) > 0 {
		if err := s.spill(); err != nil {
			s.err = err
			return
		}
	}
	if err := s.merge(); err != nil {
		s.err = err
	}
}

// merge merges the runs into one at the end of the spill file (later runs
// win for an inode) and indexes its pages.
func (s *hashStore) merge() error {
	h := &runHeap{}
	for i, r := range s.runs {
		c := &cursor{r: bufio.NewReaderSize(io.NewSectionReader(s.file, r.off, r.n*recSize), 16<<10), left: r.n, order: i}
		if err := c.next(); err != nil {
			return err
		}
		if c.ok {
			heap.Push(h, c)
		}
	}
	start := s.end
	w := bufio.NewWriterSize(io.NewOffsetWriter(s.file, start), 64<<10)
	var n int64
	s.index = s.index[:0]
	for h.Len() > 0 {
		c := heap.Pop(h).(*cursor)
		rec := c.cur
		// Drop older runs' records of the same inode: the newest comes
		// last among equal inodes, since the heap orders them by run.
		for h.Len() > 0 && (*h)[0].cur.ino == rec.ino {
			o := heap.Pop(h).(*cursor)
			rec = o.cur
			if err := o.next(); err != nil {
				return err
			}
			if o.ok {
				heap.Push(h, o)
			}
		}
		if err := c.next(); err != nil {
			return err
		}
		if c.ok {
			heap.Push(h, c)
		}
		if n%pageRecs == 0 {
			s.index = append(s.index, rec.ino)
		}
		var b [recSize]byte
		binary.BigEndian.PutUint64(b[:8], rec.ino)
		copy(b[8:], rec.sum[:])
		w.Write(b[:])
		n++
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write hash spill file: %w", err)
	}
	s.merged = run{off: start, n: n}
	s.end += n * recSize
	s.runs = nil
	return nil
}

// get returns the sum recorded for ino.
func (s *hashStore) get(ino uint64) ([sha256.Size]byte, bool) {
	if !s.finished {
		s.finish()
	}
	if s.err != nil {
		return [sha256.Size]byte{}, false
	}
	recs := s.mem
	if s.file != nil {
		p := sort.Search(len(s.index), func(i int) bool { return s.index[i] > ino }) - 1
		if p < 0 {
			return [sha256.Size]byte{}, false
		}
		slot := s.older
		if s.pages[0].at == p || s.pages[1].at == p {
			slot = 0
			if s.pages[1].at == p {
				slot = 1
			}
		} else if err := s.readPage(p, &s.pages[slot]); err != nil {
			s.err = err
			return [sha256.Size]byte{}, false
		}
		s.older = 1 - slot
		recs = s.pages[slot].recs
	}
	i, ok := slices.BinarySearchFunc(recs, ino, func(r hashRec, ino uint64) int { return cmp.Compare(r.ino, ino) })
	if !ok {
		return [sha256.Size]byte{}, false
	}
	return recs[i].sum, true
}

// readPage reads page p of the merged run into pg.
func (s *hashStore) readPage(p int, pg *page) error {
	first := int64(p) * pageRecs
	n := min(int64(pageRecs), s.merged.n-first)
	b := make([]byte, n*recSize)
	if _, err := s.file.ReadAt(b, s.merged.off+first*recSize); err != nil {
		return fmt.Errorf("read hash spill file: %w", err)
	}
	pg.recs = pg.recs[:0]
	for i := int64(0); i < n; i++ {
		r := hashRec{ino: binary.BigEndian.Uint64(b[i*recSize:])}
		copy(r.sum[:], b[i*recSize+8:(i+1)*recSize])
		pg.recs = append(pg.recs, r)
	}
	pg.at = p
	s.reads++
	return nil
}

// close removes the spill file (already unlinked: closing frees it).
func (s *hashStore) close() {
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
}

// cursor reads one sorted run.
type cursor struct {
	r     *bufio.Reader
	left  int64
	order int // the run's position: later runs win
	cur   hashRec
	ok    bool
}

func (c *cursor) next() error {
	if c.left == 0 {
		c.ok = false
		return nil
	}
	var b [recSize]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		return fmt.Errorf("read hash spill file: %w", err)
	}
	c.cur.ino = binary.BigEndian.Uint64(b[:8])
	copy(c.cur.sum[:], b[8:])
	c.left--
	c.ok = true
	return nil
}

// runHeap orders cursors by inode, then by run (older first).
type runHeap []*cursor

func (h runHeap) Len() int { return len(h) }
func (h runHeap) Less(i, j int) bool {
	if h[i].cur.ino != h[j].cur.ino {
		return h[i].cur.ino < h[j].cur.ino
	}
	return h[i].order < h[j].order
}
func (h runHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)   { *h = append(*h, x.(*cursor)) }
func (h *runHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
