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

// composers are the packages besides cmd/ and e2e/ that import verbs,
// top-down: a composer imports only composers after it in this list
// (TestComposersImportDownward), so a flow reads from the command down
// and never climbs back into the layer that called it.
// internal/supervise is hbx supervise's start-up;
// internal/guardedinstall is hbx install (and the install on start) under
// existing data; internal/adapters holds the adapters between verbs;
// internal/verbopts maps the configuration onto each verb's options;
// internal/executorrun
// prepares the executor's launch and runs it in the foreground;
// internal/pending says what a half-done release change or restore means
// for hbx status and hbx health; internal/programname checks program
// names against the supervisor's; internal/supervisorclient is where the
// commands get the running supervisor's client; internal/prune decides
// from the journals which releases a change leaves unneeded; rehearse boots a staged
// release on a copy of the data (launch) and judges it with the checks of
// the real start (health) for hbx upgrade.
// A composer is imported only by cmd/, e2e/ and another composer.
var composers = []string{
	"internal/supervise", "internal/guardedinstall", "internal/adapters", "internal/verbopts", "internal/executorrun",
	"internal/pending", "internal/programname", "internal/supervisorclient", "internal/prune", "rehearse",
}

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

// TestComposersImportDownward: a composer imports only the composers
// after it in composers, test files included, so no flow climbs back
// into the layer that called it (the supervisor's start-up calls the
// guarded install, which fills upgrade's options with the box's adapters;
// none of those calls back up).
func TestComposersImportDownward(t *testing.T) {
	all := imports(t, testenv.RepoRoot(t))
	for i, c := range composers {
		for _, pkg := range all[c] {
			if j := slices.Index(composers, pkg); j >= 0 && j <= i && pkg != c {
				t.Errorf("%s imports %s: a composer imports only the composers below it (%s)", c, pkg, strings.Join(composers[i+1:], ", "))
			}
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
// internal/config: each takes options, and the composers
// (internal/verbopts, with the config file's pin in internal/pinfile) map
// the configuration onto them. Their tests may load a configuration to cross-check a rule.
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
