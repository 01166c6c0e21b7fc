package extract

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
)

// pathSet is the current layer's names (pathKey) with whether the layer
// created each (true) or only passed through it (false). A value only
// ever turns from false to true and no name is removed within a layer, so
// a name's value is the OR of what every run recorded: runs need no
// merging. With a spill directory, every setRecs names the map is
// written out as a sorted run to an unlinked file and emptied; a run
// costs 16 bytes of memory per page of pageKeys names. Not safe for
// concurrent use.
type pathSet struct {
	dir   string
	limit int // names in the map before a spill: setRecs (tests lower it)
	m     map[pathKey]bool
	file  *os.File
	runs  []keyRun
	end   int64
	err   error // the first spill error: the map then just grows
}

// keyRec is a name on disk: its two hashes (big-endian) and a created byte.
const keyRecSize = 17

const (
	setRecs  = 128 << 10 // names kept in memory before a spill (about 4 MiB)
	pageKeys = 4080 / keyRecSize
)

// keyRun is one sorted run: where it is and the first key of each page,
// with the page last read.
type keyRun struct {
	off, n int64
	index  []pathKey
	page   []byte
	pageAt int
}

func newPathSet(dir string) *pathSet {
	return &pathSet{dir: dir, limit: setRecs, m: map[pathKey]bool{}}
}

// reset empties the set for a new layer, keeping the spill file.
func (s *pathSet) reset() {
	clear(s.m)
	s.runs, s.end = nil, 0
	if s.file != nil && s.file.Truncate(0) != nil {
		s.file.Close()
		s.file = nil
	}
}

// lookup says whether k is in the set and whether it was created.
func (s *pathSet) lookup(k pathKey) (present, created bool, err error) {
	if v, ok := s.m[k]; ok {
		present, created = true, v
		if created {
			return true, true, nil
		}
	}
	for i := range s.runs {
		ok, v, err := s.runs[i].find(s.file, k)
		if err != nil {
			return false, false, err
		}
		if ok {
			present = true
			if v {
				return true, true, nil
			}
		}
	}
	return present, false, nil
}

// inMemory reports whether k is in the map (a cheap check that may miss
// names spilled to runs).
func (s *pathSet) inMemory(k pathKey) bool {
	_, ok := s.m[k]
	return ok
}

// set records k, created or passed through; created is never undone.
func (s *pathSet) set(k pathKey, created bool) {
	s.m[k] = s.m[k] || created
	if len(s.m) >= s.limit && s.dir != "" && s.err == nil {
		s.err = s.spill()
	}
}

func keyCompare(a, b pathKey) int {
	if c := cmp.Compare(a[0], b[0]); c != 0 {
		return c
	}
	return cmp.Compare(a[1], b[1])
}

// spill writes the map as a sorted run and empties it.
func (s *pathSet) spill() error {
	if s.file == nil {
		f, err := os.CreateTemp(s.dir, ".paths-")
		if err != nil {
			return fmt.Errorf("create path spill file: %w", err)
		}
		os.Remove(f.Name()) // unlinked: nothing to clean up, whatever happens
		s.file = f
	}
	keys := make([]pathKey, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, keyCompare)
	r := keyRun{off: s.end, n: int64(len(keys)), pageAt: -1}
	w := bufio.NewWriterSize(io.NewOffsetWriter(s.file, s.end), 64<<10)
	var b [keyRecSize]byte
	for i, k := range keys {
		if i%pageKeys == 0 {
			r.index = append(r.index, k)
		}
		binary.BigEndian.PutUint64(b[:8], k[0])
		binary.BigEndian.PutUint64(b[8:16], k[1])
		b[16] = 0
		if s.m[k] {
			b[16] = 1
		}
		w.Write(b[:])
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write path spill file: %w", err)
	}
	s.runs = append(s.runs, r)
	s.end += r.n * keyRecSize
	clear(s.m)
	return nil
}

// find looks k up in the run: a binary search of its index, then of one
// page read from f.
func (r *keyRun) find(f *os.File, k pathKey) (ok, created bool, err error) {
	p := sort.Search(len(r.index), func(i int) bool { return keyCompare(r.index[i], k) > 0 }) - 1
	if p < 0 {
		return false, false, nil
	}
	if p != r.pageAt {
		first := int64(p) * pageKeys
		n := min(int64(pageKeys), r.n-first)
		r.page = slices.Grow(r.page[:0], int(n*keyRecSize))[:n*keyRecSize]
		if _, err := f.ReadAt(r.page, r.off+first*keyRecSize); err != nil {
			r.pageAt = -1
			return false, false, fmt.Errorf("read path spill file: %w", err)
		}
		r.pageAt = p
	}
	n := len(r.page) / keyRecSize
	i := sort.Search(n, func(i int) bool { return keyCompare(keyAt(r.page, i), k) >= 0 })
	if i < n && keyAt(r.page, i) == k {
		return true, r.page[i*keyRecSize+16] == 1, nil
	}
	return false, false, nil
}

func keyAt(page []byte, i int) pathKey {
	b := page[i*keyRecSize:]
	return pathKey{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:16])}
}

func (s *pathSet) close() {
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
}
