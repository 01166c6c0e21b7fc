package installer

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// linkSource makes a tree shaped like an image's rootfs, with the shapes
// that decide how the parallel walk hands out subdirectories: one wide
// directory (many small subdirectories), one deep chain, files and
// symlinks at every level, directory modes other than 0755 (sticky,
// private) and a fixed time on every directory (set after its children).
func linkSource(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	mustWrite := func(p, body string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 150 {
		d := filepath.Join(src, "node_modules", fmt.Sprintf("pkg%03d", i))
		mustWrite(filepath.Join(d, "package.json"), fmt.Sprint(i), 0o644)
		mustWrite(filepath.Join(d, "lib", "index.js"), "x", 0o755)
		if err := os.Symlink("../lib/index.js", filepath.Join(d, "bin")); err != nil {
			t.Fatal(err)
		}
	}
	deep := filepath.Join(src, "deep")
	for i := range 40 {
		deep = filepath.Join(deep, fmt.Sprintf("d%d", i))
		mustWrite(filepath.Join(deep, "f"), "deep", 0o600)
	}
	mustWrite(filepath.Join(src, "tmp", "keep"), "", 0o644)
	mustWrite(filepath.Join(src, "root", "secret"), "s", 0o600)
	if err := os.Symlink("/run", filepath.Join(src, "run")); err != nil {
		t.Fatal(err)
	}
	// Times and modes last, children before parents (a walk lists parents first).
	var dirs []string
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return err
	})
	when := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	for i := len(dirs) - 1; i >= 0; i-- {
		mode := os.FileMode(0o755)
		switch filepath.Base(dirs[i]) {
		case "tmp":
			mode = 0o777 | os.ModeSticky
		case "root":
			mode = 0o700
		}
		if err := os.Chmod(dirs[i], mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(dirs[i], when, when); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// withProcs runs the test with GOMAXPROCS at n, so the parallel walk
// hands out work on a 1-CPU machine too.
func withProcs(t *testing.T, n int) {
	t.Helper()
	old := runtime.GOMAXPROCS(n)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
}

// TestLinkTreeCopiesTheTreeSharingItsFiles: whether the walk is the
// parallel one (each nil, several CPUs) or the ordered one (each given,
// or one CPU), the copy has src's paths, types, modes, directory times
// and link targets, and its files and symlinks are src's own inodes.
func TestLinkTreeCopiesTheTreeSharingItsFiles(t *testing.T) {
	src := linkSource(t)
	want := treeState(t, src, true)
	tests := []struct {
		name  string
		procs int
		each  func(string, *unix.Stat_t) error
	}{
		{"parallel, 2 CPUs", 2, nil},
		{"parallel, 8 CPUs", 8, nil},
		{"one CPU", 1, nil},
		{"in walk order", 8, func(string, *unix.Stat_t) error { return nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			withProcs(t, tt.procs)
			dst := t.TempDir()
			if err := linkTree(src, dst, tt.each); err != nil {
				t.Fatalf("linkTree = %v", err)
			}
			checkLinkedCopy(t, dst, want)
		})
	}
}

// checkLinkedCopy checks that dst is a linked copy of the tree whose
// treeState (with inodes) is want: the same entries, modes, times and
// contents, its files and symlinks the same inodes; its directories are
// made anew, so their inodes are not compared.
func checkLinkedCopy(t *testing.T, dst string, want map[string]entryState) {
	t.Helper()
	got := treeState(t, dst, true)
	for p, e := range got {
		if e.Mode.IsDir() {
			e.Ino = want[p].Ino
			got[p] = e
		}
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("linked tree differs from its source (-got +want):\n%s", diff)
	}
}

// checkNoWalkerLeft fails when more goroutines run than before linkTree
// (a walker outlived the call), allowing the instant between a walker's
// wg.Done and its goroutine's end.
func checkNoWalkerLeft(t *testing.T, before int) {
	t.Helper()
	after := runtime.NumGoroutine()
	for deadline := time.Now().Add(2 * time.Second); after > before && time.Now().Before(deadline); after = runtime.NumGoroutine() {
		time.Sleep(time.Millisecond)
	}
	if after > before {
		t.Errorf("goroutines 2s after linkTree = %d, before = %d: a walker outlived the call", after, before)
	}
}

// TestLinkTreeInWalkOrder: with each given, entries come in Walk order
// (sorted names, depth first), each before it is linked.
func TestLinkTreeInWalkOrder(t *testing.T) {
	withProcs(t, 8)
	src := linkSource(t)
	var got []string
	err := linkTree(src, t.TempDir(), func(p string, _ *unix.Stat_t) error {
		got = append(got, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	filepath.WalkDir(src, func(p string, _ fs.DirEntry, err error) error {
		if rel, _ := filepath.Rel(src, p); rel != "." {
			want = append(want, filepath.ToSlash(rel))
		}
		return err
	})
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("linkTree's entries (-got +want):\n%s", diff)
	}
}

// TestLinkTreeFailsOnFirstError: an entry that cannot be linked (a name
// already taken in dst, deep in a subdirectory another goroutine links;
// a file type a release never holds) fails the whole walk with an error
// naming the entry, on the parallel walk as on the ordered one, and the
// call returns only once every goroutine of the walk is done.
func TestLinkTreeFailsOnFirstError(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, src, dst string)
		want    string
	}{
		{"name taken in dst", func(t *testing.T, src, dst string) {
			if err := os.MkdirAll(filepath.Join(dst, "node_modules"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, `mkdir "node_modules": file exists`},
		{"fifo deep in src", func(t *testing.T, src, dst string) {
			p := filepath.Join(src, "node_modules", "pkg120", "lib")
			os.Chmod(p, 0o755)
			if err := unix.Mkfifo(filepath.Join(p, "pipe"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, `"node_modules/pkg120/lib/pipe": unexpected file type`},
	}
	for _, tt := range tests {
		for _, procs := range []int{1, 2, 8} {
			t.Run(fmt.Sprintf("%s, %d CPUs", tt.name, procs), func(t *testing.T) {
				withProcs(t, procs)
				src, dst := linkSource(t), t.TempDir()
				tt.prepare(t, src, dst)
				before := runtime.NumGoroutine()
				err := linkTree(src, dst, nil)
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("linkTree = %v, want an error containing %q", err, tt.want)
				}
				checkNoWalkerLeft(t, before)
			})
		}
	}
}

// TestLinkTreeWalkersCapped: the parallel walk uses one goroutine per CPU
// up to maxLinkWalkers, whatever GOMAXPROCS says, and none beside the
// caller when a callback asks for Walk order or there is one CPU.
func TestLinkTreeWalkersCapped(t *testing.T) {
	each := func(string, *unix.Stat_t) error { return nil }
	for _, tt := range []struct {
		procs int
		each  func(string, *unix.Stat_t) error
		want  int
	}{
		{1, nil, 0}, {2, nil, 2}, {8, nil, 8}, {64, nil, maxLinkWalkers}, {8, each, 0},
	} {
		withProcs(t, tt.procs)
		if got := cap(newLinker(tt.each).slots); got != tt.want {
			t.Errorf("GOMAXPROCS %d, callback %v: %d walker slots, want %d", tt.procs, tt.each != nil, got, tt.want)
		}
	}
}
