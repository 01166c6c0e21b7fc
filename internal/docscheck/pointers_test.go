package docscheck

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pointerRE matches a pointer into the docs from Go source (a --help text,
// an error's hint, a comment): docs/FILE.md with an optional #anchor.
var pointerRE = regexp.MustCompile(`docs/[a-z0-9-]+\.md(?:#[a-z0-9-]+)?`)

// brokenPointers returns the docs pointers of the product .go files under
// root (tests name made-up pages) whose file or heading does not exist,
// each as "path:line: pointer: why".
func brokenPointers(root string) ([]string, error) {
	var broken []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read source: %w", err)
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(b), "\n") {
			for _, p := range pointerRE.FindAllString(line, -1) {
				if msg := checkLink(root, "README.md", "", p); msg != "" {
					broken = append(broken, fmt.Sprintf("%s:%d: %s: %s", rel, i+1, p, msg))
				}
			}
		}
		return nil
	})
	return broken, err
}

// TestSourcePointersToDocsResolve fails on a docs/FILE.md#heading named in
// product Go source (what --help and hints send an operator to read) that leads
// nowhere.
func TestSourcePointersToDocsResolve(t *testing.T) {
	broken, err := brokenPointers(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range broken {
		t.Error(b)
	}
}

// TestBrokenPointersFindsEachKind proves the checker on a small tree: a
// missing page and a missing heading are reported, a good pointer is not.
func TestBrokenPointersFindsEachKind(t *testing.T) {
	root := t.TempDir()
	for name, text := range map[string]string{
		"docs/a.md": "# A\n\n## Offline install\n",
		"cmd/x.go":  "package x\n// docs/a.md#offline-install docs/a.md\n// docs/gone.md\n// docs/a.md#no-such\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := brokenPointers(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cmd/x.go:3: docs/gone.md: no such file", "cmd/x.go:4: docs/a.md#no-such: no heading with anchor #no-such"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("brokenPointers = %q, want %q", got, want)
	}
}
