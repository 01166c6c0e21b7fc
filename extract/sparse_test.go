package extract

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
)

// sparseSource writes files with holes into dir: data at the start, in the
// middle and at the last byte; one ending in a hole; one all hole.
func sparseSource(t *testing.T, dir string) []string {
	t.Helper()
	type region struct {
		off  int64
		data []byte
	}
	files := []struct {
		name    string
		size    int64
		regions []region
	}{
		{"s/middle", 8 << 20, []region{{0, []byte("head")}, {3 << 20, tartest.PseudoRandom(10000, 1)}, {8<<20 - 1, []byte("Z")}}},
		{"s/tail-hole", 5 << 20, []region{{0, tartest.PseudoRandom(5000, 2)}}},
		{"s/all-hole", 1 << 20, nil},
		{"s/dense", 20000, []region{{0, tartest.PseudoRandom(20000, 3)}}},
	}
	if err := os.MkdirAll(filepath.Join(dir, "s"), 0o755); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		fh, err := os.Create(filepath.Join(dir, f.name))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range f.regions {
			if _, err := fh.WriteAt(r.data, r.off); err != nil {
				t.Fatal(err)
			}
		}
		if err := fh.Truncate(f.size); err != nil {
			t.Fatal(err)
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
		names = append(names, f.name)
	}
	return names
}

// fileFacts is what the sparse tests compare: size, content and the
// 512-byte blocks allocated (st_blocks).
type fileFacts struct {
	size    int64
	blocks  int64
	content []byte
}

func factsOf(t *testing.T, p string) fileFacts {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return fileFacts{size: st.Size, blocks: st.Blocks, content: b}
}

// TestSparseDifferentialGNUTar: GNU tar --sparse archives in each of its
// forms (the old GNU type 'S', PAX 0.0, 0.1 and 1.0) extract to the files
// GNU tar extracts, with the same content, size and allocated blocks
// (st_blocks): holes stay holes. Before, every hole was written as zeros
// and the old GNU form was refused.
func TestSparseDifferentialGNUTar(t *testing.T) {
	gnutar, err := exec.LookPath("tar")
	if err != nil {
		testenv.Missing(t, "GNU tar is not installed (apt-get install tar)")
	}
	src := t.TempDir()
	names := sparseSource(t, src)
	for _, form := range [][]string{
		{"--format=gnu"},
		{"--format=pax", "--sparse-version=0.0"},
		{"--format=pax", "--sparse-version=0.1"},
		{"--format=pax", "--sparse-version=1.0"},
	} {
		t.Run(fmt.Sprint(form), func(t *testing.T) {
			args := append(append([]string{"--sparse"}, form...), "-cf", "-", "-C", src)
			layer, err := exec.Command(gnutar, append(args, names...)...).Output()
			if err != nil {
				t.Fatalf("tar -c: %v", err)
			}
			theirs := filepath.Join(t.TempDir(), "gnu")
			if err := os.Mkdir(theirs, 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(gnutar, "-xpf", "-", "-C", theirs)
			cmd.Stdin = bytes.NewReader(layer)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("tar -x: %v\n%s", err, out)
			}
			for _, hash := range []bool{false, true} {
				ours, _ := sandbox(t)
				if err := applyLayers(t, ours, Options{HashFiles: hash}, layer); err != nil {
					t.Fatal(err)
				}
				for _, n := range names {
					got, want := factsOf(t, filepath.Join(ours, n)), factsOf(t, filepath.Join(theirs, n))
					if got.size != want.size || !bytes.Equal(got.content, want.content) {
						t.Errorf("HashFiles=%v: %s: %d bytes, want GNU tar's %d (content equal: %v)", hash, n, got.size, want.size, bytes.Equal(got.content, want.content))
					}
					if got.blocks != want.blocks {
						t.Errorf("HashFiles=%v: %s: %d blocks allocated, want GNU tar's %d", hash, n, got.blocks, want.blocks)
					}
				}
			}
		})
	}
}

// sparseBomb is a layer of n sparse files (PAX 0.1), each claiming size
// bytes of which only the last is data.
func sparseBomb(n int, size int64) []byte {
	var layer []byte
	for i := range n {
		layer = append(layer, tartest.Raw(fmt.Sprintf("b%03d", i), tar.TypeReg, [][2]string{
			{"GNU.sparse.major", "0"}, {"GNU.sparse.minor", "1"}, {"GNU.sparse.size", fmt.Sprint(size)},
			{"GNU.sparse.numblocks", "1"}, {"GNU.sparse.map", fmt.Sprintf("%d,1", size-1)},
		}, []byte("Z"))...)
	}
	return append(layer, tartest.End()...)
}

// TestSparseBomb: a layer of a few kilobytes whose sparse files claim
// gigabytes costs what its data costs on disk. The size cap counts claimed
// sizes (holes included), so the layer is refused once they pass it, after
// bounded work; under the cap it is applied with every hole a hole.
// Before, each hole was written out as zeros (GiBs of writes).
func TestSparseBomb(t *testing.T) {
	cases := []struct {
		name    string
		files   int
		max     int64
		wantErr error
	}{
		{"claimed sizes under the cap", 3, 1 << 30, nil},
		{"claimed sizes past the cap", 8, 1 << 30, ErrTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			layer := sparseBomb(c.files, 256<<20)
			root, _ := sandbox(t)
			start := time.Now()
			err := applyLayers(t, root, Options{MaxBytes: c.max, HashFiles: true}, layer)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("Apply() = %v, want %v", err, c.wantErr)
			}
			if took := time.Since(start); took > 2*time.Minute {
				t.Errorf("Apply() took %v", took)
			}
			var blocks, files int64
			entries, _ := os.ReadDir(root)
			for _, e := range entries {
				var st unix.Stat_t
				if err := unix.Lstat(filepath.Join(root, e.Name()), &st); err != nil {
					t.Fatal(err)
				}
				blocks += st.Blocks
				files++
				if c.wantErr == nil && st.Size != 256<<20 {
					t.Errorf("%s: size %d, want %d", e.Name(), st.Size, 256<<20)
				}
			}
			if blocks*512 > files*64<<10 {
				t.Errorf("%d files take %d KiB on disk, want at most 64 KiB each", files, blocks/2)
			}
			if c.wantErr == nil && files != int64(c.files) {
				t.Errorf("%d files applied, want %d", files, c.files)
			}
		})
	}
}
