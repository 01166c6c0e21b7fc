package release

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/tartest"
)

// writeFiles writes files.json of inst as the installer does: Scan's list.
func writeFiles(t *testing.T, inst *Installed, files []File) {
	t.Helper()
	b, err := json.Marshal(files)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inst.Dir, FilesFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVerify: Verify, which streams files.json beside a walk of the
// rootfs, finds each kind of difference Diff finds, the first in walk
// order, and calls a files.json that is not a list in walk order damaged
// (read one entry ahead, the order is checked before a walk entry is
// matched).
func TestVerify(t *testing.T) {
	layer := tartest.New().Dir("d", 0o755).File("d/f", "hello", 0o644).File("d-x", "x", 0o644).
		Dir("d/e", 0o755).File("d/e/g", "g", 0o644).Symlink("l", "/d/f").Bytes()
	cases := []struct {
		name    string
		change  func(t *testing.T, rootfs string, files []File) []File // returns the list to record
		want    string
		wantErr error
	}{
		{"same", func(t *testing.T, _ string, f []File) []File { return f }, "", nil},
		{"content changed", func(t *testing.T, r string, f []File) []File {
			os.WriteFile(filepath.Join(r, "d/f"), []byte("HELLO"), 0o644)
			return f
		}, "d/f content differs", nil},
		{"size changed", func(t *testing.T, r string, f []File) []File {
			os.WriteFile(filepath.Join(r, "d/e/g"), []byte("gg"), 0o644)
			return f
		}, "d/e/g has 2 bytes, want 1", nil},
		{"mode changed", func(t *testing.T, r string, f []File) []File {
			os.Chmod(filepath.Join(r, "d-x"), 0o600)
			return f
		}, "d-x has mode 0600, want 0644", nil},
		{"target changed", func(t *testing.T, r string, f []File) []File {
			os.Remove(filepath.Join(r, "l"))
			os.Symlink("/elsewhere", filepath.Join(r, "l"))
			return f
		}, `l points to "/elsewhere", want "/d/f"`, nil},
		{"type changed", func(t *testing.T, r string, f []File) []File {
			os.Remove(filepath.Join(r, "d-x"))
			os.Mkdir(filepath.Join(r, "d-x"), 0o755)
			return f
		}, "d-x is a dir, want a file", nil},
		{"first missing in walk order", func(t *testing.T, r string, f []File) []File {
			os.Remove(filepath.Join(r, "l"))
			os.RemoveAll(filepath.Join(r, "d/e"))
			return f
		}, "d/e is missing", nil},
		{"last missing", func(t *testing.T, r string, f []File) []File {
			os.Remove(filepath.Join(r, "l"))
			return f
		}, "l is missing", nil},
		{"one more", func(t *testing.T, r string, f []File) []File {
			os.WriteFile(filepath.Join(r, "d/e/h"), []byte("h"), 0o644)
			return f
		}, "d/e/h was not installed", nil},
		{"one more at the end", func(t *testing.T, r string, f []File) []File {
			os.WriteFile(filepath.Join(r, "z"), []byte("z"), 0o644)
			return f
		}, "z was not installed", nil},
		{"list out of walk order", func(t *testing.T, _ string, f []File) []File {
			f[1], f[2] = f[2], f[1]
			return f
		}, "", ErrCorrupt},
		{"list out of walk order at its start", func(t *testing.T, _ string, f []File) []File {
			f[0], f[1] = f[1], f[0]
			return f
		}, "", ErrCorrupt},
		{"list with a path twice", func(t *testing.T, _ string, f []File) []File {
			return append(f[:2], f[1:]...)
		}, "", ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inst := fakeRelease(t, layer, ImageConfig{})
			files, err := Scan(inst.Rootfs(), nil)
			if err != nil {
				t.Fatal(err)
			}
			writeFiles(t, inst, c.change(t, inst.Rootfs(), files))
			list, err := inst.OpenFiles()
			if err != nil {
				t.Fatal(err)
			}
			defer list.Close()
			got, err := Verify(inst.Rootfs(), list)
			if !errors.Is(err, c.wantErr) || (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Errorf("Verify() = %q, %v; want %q, %v", got, err, c.want, c.wantErr)
			}
		})
	}
}

// TestOpenFilesDamaged: a files.json that is not a JSON array of entries
// is ErrCorrupt, at open or at the entry that breaks it.
func TestOpenFilesDamaged(t *testing.T) {
	for _, c := range []struct{ name, body string }{
		{"missing", ""},
		{"an object", `{"path":"x"}`},
		{"cut short", `[{"path":"d","type":"dir","mode":493},`},
		{"not closed", `[{"path":"d","type":"dir","mode":493}`},
		{"a bad entry", `[{"path":3}]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			inst := fakeRelease(t, tartest.New().Dir("d", 0o755).Bytes(), ImageConfig{})
			if c.body != "" {
				os.WriteFile(filepath.Join(inst.Dir, FilesFile), []byte(c.body), 0o644)
			}
			list, err := inst.OpenFiles()
			if err == nil {
				defer list.Close()
				_, err = Verify(inst.Rootfs(), list)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("Verify() = %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestVerifyMemoryFlat: verifying 20,000 entries keeps no more live heap
// than verifying 2,000 (ReadFiles, Scan and Diff held three lists and a
// map, about 600 bytes per entry).
func TestVerifyMemoryFlat(t *testing.T) {
	peak := func(n int) uint64 {
		b := tartest.New().Dir("many", 0o755)
		for i := range n {
			b.File("many/"+strings.Repeat("x", 20)+strconv.Itoa(i), "", 0o644)
		}
		inst := fakeRelease(t, b.Bytes(), ImageConfig{})
		files, err := Scan(inst.Rootfs(), nil)
		if err != nil {
			t.Fatal(err)
		}
		writeFiles(t, inst, files)
		files = nil
		list, err := inst.OpenFiles()
		if err != nil {
			t.Fatal(err)
		}
		defer list.Close()
		var max uint64
		var ms runtime.MemStats
		seen := 0
		probe := func() {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			max = maxU(max, ms.HeapAlloc)
		}
		v := &verifier{list: list}
		if err := v.advance(); err != nil {
			t.Fatal(err)
		}
		err = Walk(inst.Rootfs(), nil, func(f File) error {
			if seen++; seen == n/2 {
				probe()
			}
			return v.compare(f)
		})
		if err != nil || v.why != "" {
			t.Fatalf("Verify() = %q, %v", v.why, err)
		}
		return max
	}
	small, large := peak(2000), peak(20000)
	// One directory's names are held while it is walked: 20 bytes and a
	// string header more per entry.
	if large > small+18000*64 {
		t.Errorf("live heap verifying 20,000 entries is %d bytes, 2,000: %d (want the difference under 64 bytes per entry)", large, small)
	}
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
