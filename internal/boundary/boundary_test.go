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

// composers are the packages besides cmd/ and e2e/ that import verbs:
// internal/box composes the box from the configuration for cmd/hbx;
// internal/programname checks program names against the supervisor's.
// internal/pending says what a half-done release change or restore means
// for hbx status and hbx health. internal/prune decides from the journals
// which releases a change leaves unneeded.
// A composer is imported only by cmd/, e2e/ and another composer.
var composers = []string{"internal/box", "internal/programname", "internal/pending", "internal/prune"}

// renderer renders the verbs' results for cmd/hbx (internal/ui): like the
// composer it reads verb packages' types and is imported only by cmd/ and
// e2e/.
const renderer = "internal/ui"

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
// except the composers (composers) and the renderer (internal/ui). Only
// cmd/ and e2e/ wire verbs together, and only they import those (a
// composer may import another composer).
func TestVerbsImportNoVerb(t *testing.T) {
	root := testenv.RepoRoot(t)
	all := imports(t, root)
	for _, v := range verbs {
		if _, ok := all[v]; !ok {
			t.Errorf("verb package %s/ not found under %s (renamed? update verbs)", v, root)
		}
	}
	for _, c := range composers {
		if _, ok := all[c]; !ok {
			t.Errorf("composer %s/ not found under %s (renamed? update composers)", c, root)
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
			if pkg == dir || slices.Contains(composers, pkg) && slices.Contains(composers, dir) {
				continue
			}
			if slices.Contains(composers, pkg) || pkg == renderer {
				t.Errorf("%s imports %s: the composers and the renderer are imported only by cmd/ and e2e/", dir, pkg)
			}
		}
		if slices.Contains(composers, dir) || dir == renderer {
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

// configFree are the packages whose product code never imports
// internal/config: each takes options, and the composers (internal/box,
// with the config file's pin in internal/pinfile) maps the configuration
// onto them. Their tests may load a configuration to cross-check a rule.
var configFree = append(slices.Clone(verbs), "extract", "release")

// TestVerbsImportNoConfig: no verb package's product code imports
// internal/config.
func TestVerbsImportNoConfig(t *testing.T) {
	root := testenv.RepoRoot(t)
	fset := token.NewFileSet()
	for _, dir := range configFree {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("package %s/ has no .go files under %s (%v): renamed? update configFree", dir, root, err)
		}
		for _, p := range files {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatalf("read imports: %v", err)
			}
			for _, spec := range f.Imports {
				if path, _ := strconv.Unquote(spec.Path.Value); path == module+"/internal/config" {
					t.Errorf("%s imports internal/config: a verb takes options; map the configuration in a composer (%s)", filepath.ToSlash(p[len(root)+1:]), strings.Join(composers, ", "))
				}
			}
		}
	}
}
