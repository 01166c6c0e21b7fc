package extract

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hermesbox/hbx/internal/tartest"
)

func sumOf(i uint64, gen byte) [sha256.Size]byte {
	var b [9]byte
	binary.BigEndian.PutUint64(b[:], i)
	b[8] = gen
	return sha256.Sum256(b[:])
}

// TestHashStore: every recorded inode is found with its latest sum, in
// memory and spilled in sorted runs (several runs, an inode reused within
// a run and across runs, records added after lookups), and nothing else is.
func TestHashStore(t *testing.T) {
	for _, c := range []struct {
		name string
		dir  string
		n    uint64
	}{
		{"in memory", "", 10000},
		{"spilled in runs", t.TempDir(), 3*runRecs + 123},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newHashStore(c.dir)
			defer s.close()
			// Inodes in a scattered order; every 7th recorded again later.
			for i := uint64(0); i < c.n; i++ {
				ino := (i*7919)%c.n + 10
				s.add(ino, sumOf(ino, 0))
				if i%1000 == 999 {
					s.add(ino, sumOf(ino, 1)) // the same inode again in the same run
				}
			}
			for ino := uint64(10); ino < c.n+10; ino += 7 {
				s.add(ino, sumOf(ino, 2))
			}
			check := func(extra uint64) {
				t.Helper()
				for i := uint64(0); i < c.n; i++ {
					ino := (i*7919)%c.n + 10
					want := sumOf(ino, 0)
					switch {
					case (ino-10)%7 == 0:
						want = sumOf(ino, 2)
					case i%1000 == 999:
						want = sumOf(ino, 1)
					}
					if got, ok := s.get(ino); !ok || got != want {
						t.Fatalf("get(%d) = %x, %v; want %x", ino, got[:4], ok, want[:4])
					}
				}
				for _, ino := range []uint64{0, 9, c.n + 10 + extra, 1 << 62} {
					if _, ok := s.get(ino); ok {
						t.Errorf("get(%d) found a sum never recorded", ino)
					}
				}
			}
			check(1)
			// Added after lookups: the store takes it and finds it.
			s.add(c.n+10, sumOf(c.n+10, 0))
			if got, ok := s.get(c.n + 10); !ok || got != sumOf(c.n+10, 0) {
				t.Errorf("get(%d) after a late add = %v", c.n+10, ok)
			}
			check(1)
			if c.dir != "" {
				if s.file == nil || s.err != nil {
					t.Errorf("spill file %v, error %v: want spilled runs", s.file, s.err)
				}
				if len(s.index) > int(c.n)/pageRecs+2 {
					t.Errorf("index has %d pages for %d records", len(s.index), c.n)
				}
				if names, _ := os.ReadDir(c.dir); len(names) != 0 {
					t.Errorf("spill directory holds %d names, want none (the file is unlinked)", len(names))
				}
			}
		})
	}
}

// TestHashStoreSpillFails: a spill directory that cannot take the file
// makes lookups miss (the caller then hashes the file itself) rather
// than return a wrong sum.
func TestHashStoreSpillFails(t *testing.T) {
	s := newHashStore(filepath.Join(t.TempDir(), "missing"))
	defer s.close()
	for i := uint64(0); i < runRecs+1; i++ {
		s.add(i, sumOf(i, 0))
	}
	if s.err == nil {
		t.Fatal("spill into a missing directory did not fail")
	}
	if got, ok := s.get(5); ok && got != sumOf(5, 0) {
		t.Errorf("get(5) = a wrong sum after a failed spill")
	}
}

// TestFileHashSpilled: an Applier with SpillDir reports the sha256 of
// each file it wrote, as it does in memory.
func TestFileHashSpilled(t *testing.T) {
	b := tartest.New().Dir("d", 0o755)
	for i := range 300 {
		b.File("d/f"+string(rune('a'+i%26))+string(rune('a'+i/26)), string(bytes.Repeat([]byte{byte(i)}, i)), 0o644)
	}
	root, _ := sandbox(t)
	spill := t.TempDir()
	a, err := New(root, Options{HashFiles: true, SpillDir: spill})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Apply(bytes.NewReader(b.Bytes())); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "d"))
	for _, e := range entries {
		info, _ := e.Info()
		content, _ := os.ReadFile(filepath.Join(root, "d", e.Name()))
		want := sha256.Sum256(content)
		got, ok := a.FileHash(inoOf(t, info))
		if !ok || got != hex.EncodeToString(want[:]) {
			t.Errorf("FileHash(%s) = %q, %v; want %x", e.Name(), got, ok, want)
		}
	}
}

func inoOf(t *testing.T, info os.FileInfo) uint64 {
	t.Helper()
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatal("no Stat_t")
	}
	return st.Ino
}

// TestPathSetSpilled: names spilled to runs are found with the OR of what
// every run and the map recorded (created wins), and absent names are not.
func TestPathSetSpilled(t *testing.T) {
	s := newPathSet(t.TempDir())
	defer s.close()
	s.limit = 1000
	const n = 5500
	for i := uint64(0); i < n; i++ {
		s.set(pathKey{i * 7919 % n, i}, i%3 == 0)
	}
	// Set again, created, after they were spilled: the OR is created.
	for i := uint64(1); i < n; i += 3 {
		s.set(pathKey{i * 7919 % n, i}, true)
	}
	if len(s.runs) < 5 {
		t.Fatalf("%d runs, want at least 5", len(s.runs))
	}
	for i := uint64(0); i < n; i++ {
		present, created, err := s.lookup(pathKey{i * 7919 % n, i})
		if want := i%3 != 2; err != nil || !present || created != want {
			t.Fatalf("lookup(%d) = %v, %v, %v; want present, created %v", i, present, created, err, want)
		}
	}
	if present, _, err := s.lookup(pathKey{1, 0}); present || err != nil {
		t.Errorf("lookup of a name never set = %v, %v", present, err)
	}
	s.reset()
	if present, _, _ := s.lookup(pathKey{0, 0}); present || len(s.runs) != 0 {
		t.Errorf("after reset: present %v, %d runs", present, len(s.runs))
	}
}

// TestHashStoreTwoReaders: two readers going through the spilled store
// at once, each in inode order (a release's listing and its layer
// state's, written side by side), find every sum and read each page back
// once, not once per turn.
func TestHashStoreTwoReaders(t *testing.T) {
	const n = 2*runRecs + 77
	s := newHashStore(t.TempDir())
	defer s.close()
	for ino := uint64(1); ino <= n; ino++ {
		s.add(ino, sumOf(ino, 0))
	}
	half := uint64(n / 2)
	for i := uint64(1); i <= half; i++ {
		for _, ino := range []uint64{i, half + i} {
			if got, ok := s.get(ino); !ok || got != sumOf(ino, 0) {
				t.Fatalf("get(%d) = %x, %v; want %x", ino, got[:4], ok, sumOf(ino, 0))
			}
		}
	}
	if s.file == nil {
		t.Fatal("the store did not spill")
	}
	if pages := len(s.index); s.reads > pages+1 {
		t.Errorf("%d pages read back for %d pages, want each once", s.reads, pages)
	}
}
