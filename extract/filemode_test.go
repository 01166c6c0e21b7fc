package extract

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/tartest"
)

// TestFileModesWhateverTheUmask: a regular file is created with its final
// mode and chmod'ed only when the umask (or a sticky bit) left it short, so
// every file ends with exactly its entry's mode (RuntimeMode's with
// Options.RuntimeModes), its content and its mtime, under any umask: a
// read-only or mode-0 file is still written whole.
func TestFileModesWhateverTheUmask(t *testing.T) {
	mtime := time.Date(2021, 5, 6, 7, 8, 9, 123456789, time.UTC)
	modes := []int64{0o644, 0o755, 0o666, 0o777, 0o600, 0o444, 0o000, 0o1755, 0o640}
	for _, umask := range []int{0o022, 0o077, 0o777, 0o000} {
		for _, runtime := range []bool{false, true} {
			t.Run(fmt.Sprintf("umask %04o runtime modes %v", umask, runtime), func(t *testing.T) {
				old := unix.Umask(umask)
				t.Cleanup(func() { unix.Umask(old) })
				root, _ := sandbox(t)
				b := tartest.New()
				for _, m := range modes {
					b.Header(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("f%04o", m), Mode: m, ModTime: mtime},
						bytes.Repeat([]byte{byte(m)}, 5000+int(m)))
				}
				if err := applyLayers(t, root, Options{RuntimeModes: runtime, HashFiles: true}, b.Bytes()); err != nil {
					t.Fatal(err)
				}
				unix.Umask(old)
				for _, m := range modes {
					want := uint32(m)
					if runtime {
						want = RuntimeMode(want)
					}
					p := filepath.Join(root, fmt.Sprintf("f%04o", m))
					var st unix.Stat_t
					if err := unix.Lstat(p, &st); err != nil {
						t.Fatal(err)
					}
					if st.Mode&0o7777 != want {
						t.Errorf("mode of %s = %04o, want %04o", filepath.Base(p), st.Mode&0o7777, want)
					}
					if got := time.Unix(st.Mtim.Unix()); !got.Equal(mtime) {
						t.Errorf("mtime of %s = %v, want %v", filepath.Base(p), got, mtime)
					}
					got, err := os.ReadFile(p)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, bytes.Repeat([]byte{byte(m)}, 5000+int(m))) {
						t.Errorf("content of %s: %d bytes, not what the entry holds", filepath.Base(p), len(got))
					}
				}
				if fi, err := os.Lstat(root); err != nil || fi.Mode()&fs.ModeType != fs.ModeDir {
					t.Fatalf("root: %v, %v", fi, err)
				}
			})
		}
	}
}
