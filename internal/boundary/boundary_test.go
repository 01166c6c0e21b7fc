package boundary

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the import path of the repository's module.
const module = "github.com/hermesbox/hbx"

// verbs are the packages that each do one job; cmd/hbx wires them.
var verbs = []string{"installer", "supervisor", "health", "backup", "upgrade", "launch"}

// imports returns, for each package directory under root (relative,
// slash-separated), the module-relative paths of the module's packages its
// .go files import, test files included. Directories named testdata or
// starting with "." or "_" are skipped, as the go tool skips them.
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		for _, spec := range f.Imports {
			path, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			if pkg, ok := strings.CutPrefix(path, module+"/"); ok && !slices.Contains(out[dir], pkg) {
				out[dir] = append(out[dir], pkg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read imports under %s: %v", root, err)
	}
	return out
}

// top is the first element of a module-relative package path.
func top(pkg string) string {
	first, _, _ := strings.Cut(pkg, "/")
	return first
}

// TestVerbsImportNoVerb: no verb package imports another verb package, and
// no shared layer (release, extract, internal/...) imports a verb package.
// Only cmd/ and e2e/ wire verbs together.
func TestVerbsImportNoVerb(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("find the module root: %v", err)
	}
	all := imports(t, root)
	for _, v := range verbs {
		if _, ok := all[v]; !ok {
			t.Errorf("verb package %s/ not found under %s (renamed? update verbs)", v, root)
		}
	}
	dirs := make([]string, 0, len(all))
	for d := range all {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	for _, dir := range dirs {
		switch top(dir) {
		case "cmd", "e2e":
			continue
		}
		for _, pkg := range all[dir] {
			if top(pkg) == top(dir) || !slices.Contains(verbs, top(pkg)) {
				continue
			}
			t.Errorf("%s imports %s: a verb package is imported only by cmd/ and e2e/ (move the shared piece to release/, extract/ or internal/)", dir, pkg)
		}
	}
}
