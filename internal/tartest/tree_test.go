package tartest

import (
	"slices"
	"testing"
)

// TestWriteTree: what Write lays out, Tree reads back line for line in the
// same DSL (modes exact whatever the umask, sticky included), and Shape
// without the contents.
func TestWriteTree(t *testing.T) {
	dir := t.TempDir()
	lines := []string{
		"a/ 0750",
		"a/b/ 0755",
		"a/b/f 0640 hello world",
		"a/x 0755 #!/bin/sh",
		"a/l => b/f",
		"abs => /etc/passwd",
		"tmp/ 1777",
	}
	Write(t, dir, lines...)
	Write(t, dir, "a/h == a/b/f", "a/b/f mtime 2020-01-02T03:04:05.123456789Z")
	want := append(slices.Clone(lines), "a/h 0640 hello world")
	slices.Sort(want)
	if got := Tree(t, dir); !slices.Equal(got, want) {
		t.Errorf("Tree() = %q\nwant %q", got, want)
	}
	shape := []string{"a/ 0750", "a/b/ 0755", "a/b/f 0640", "a/h 0640", "a/l => b/f", "a/x 0755", "abs => /etc/passwd", "tmp/ 1777"}
	if got := Shape(t, dir); !slices.Equal(got, shape) {
		t.Errorf("Shape() = %q\nwant %q", got, shape)
	}
	if a, b := PseudoRandom(100, 1), PseudoRandom(100, 1); len(a) != 100 || !slices.Equal(a, b) || slices.Equal(a, PseudoRandom(100, 2)) {
		t.Errorf("PseudoRandom is not a function of its seed")
	}
}
