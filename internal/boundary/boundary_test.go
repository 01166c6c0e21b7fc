package boundary

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv"
)

// module is the import path of the repository's module.
const module = "github.com/hermesbox/hbx"

// verbs are the packages that each do one job; cmd/ and the composer wire them.
var verbs = []string{"installer", "supervisor", "health", "backup", "upgrade", "launch"}

// composer is the one package besides cmd/ and e2e/ that imports several
// verbs: it composes the box from the configuration for cmd/hbx.
const composer = "internal/box"

// imports returns, for each package directory under root (relative,
// slash-separated), the module-relative paths of the module's packages its
// .go files import, test files included (testenv.GoFiles lists them).
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	for _, p := range testenv.GoFiles(t, root) {
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("read imports: %v", err)
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.ToSlash(rel)
		for _, spec := range f.Imports {
			path, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				t.Fatalf("%s: import %s: %v", p, spec.Path.Value, err)
			}
			if pkg, ok := strings.CutPrefix(path, module+"/"); ok && !slices.Contains(out[dir], pkg) {
				out[dir] = append(out[dir], pkg)
			}
		}
	}
	return out
}

// top is the first element of a module-relative package path.
func top(pkg string) string {
	first, _, _ := strings.Cut(pkg, "/")
	return first
}

// TestVerbsImportNoVerb: no verb package imports another verb package, and
// no shared layer (release, extract, internal/...) imports a verb package,
// except the composer (internal/box). Only cmd/ and e2e/ wire verbs
// together, and only they import the composer.
func TestVerbsImportNoVerb(t *testing.T) {
	root := testenv.RepoRoot(t)
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
			if pkg == composer && dir != composer {
				t.Errorf("%s imports %s: the composer is imported only by cmd/ and e2e/", dir, pkg)
			}
		}
		if dir == composer {
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

// TestCLIKnowsNoConfig: internal/cli, the rules every command shares,
// imports no package of the module but internal/suggest (its "did you
// mean"), so the command-line layer does not depend on the configuration.
func TestCLIKnowsNoConfig(t *testing.T) {
	all := imports(t, testenv.RepoRoot(t))
	for _, pkg := range all["internal/cli"] {
		if pkg != "internal/suggest" {
			t.Errorf("internal/cli imports %s: it may import only internal/suggest of the module", pkg)
		}
	}
}
