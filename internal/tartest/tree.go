package tartest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// Tree describes the tree below dir (dir itself left out), one line per
// path, sorted, in the DSL of Go's os/root_test.go, the project's one test
// filesystem DSL: "a/ 0755" a directory (sticky shown as 1000),
// "a/f 0644 content" a regular file, "a/l => target" a symlink (not
// followed). Paths are slash-separated and relative to dir. A walk error
// fails t.
func Tree(t testing.TB, dir string) []string {
	t.Helper()
	return describe(t, dir, true)
}

// Shape is Tree without file contents: "a/f 0644".
func Shape(t testing.TB, dir string) []string {
	t.Helper()
	return describe(t, dir, false)
}

func describe(t testing.TB, dir string, content bool) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode()
		switch {
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out = append(out, fmt.Sprintf("%s => %s", rel, target))
		case mode.IsDir():
			bits := uint32(mode.Perm())
			if mode&fs.ModeSticky != 0 {
				bits |= 0o1000
			}
			out = append(out, fmt.Sprintf("%s/ %04o", rel, bits))
		case !content:
			out = append(out, fmt.Sprintf("%s %04o", rel, uint32(mode.Perm())))
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out = append(out, fmt.Sprintf("%s %04o %s", rel, uint32(mode.Perm()), b))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	sort.Strings(out)
	return out
}
