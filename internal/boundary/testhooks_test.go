package boundary

import (
	"go/build"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/internal/testenv"
)

// productTags are the build tags of `make build` and `make cross` (the
// Makefile's GOFLAGS): the product build.
var productTags = []string{"containers_image_openpgp"}

// testOnly are the module's packages that exist for tests: the product
// never links them.
var testOnly = []string{"internal/testenv", "internal/registrytest", "internal/tartest", "internal/testimage", "internal/benchimage", "internal/bench"}

// hooks is the one package of the product that holds test hooks; its
// hooks are armed only by the build tag killpoint.Tag.
const hooks = "internal/killpoint"

// product returns the module-relative packages cmd/hbx links when built
// with tags, each mapped to the module packages its non-test files import
// (build constraints evaluated as go build does, by go/build).
func product(t *testing.T, root string, tags []string) map[string][]string {
	t.Helper()
	ctx := build.Default
	ctx.BuildTags = tags
	ctx.CgoEnabled = false
	ctx.GOOS = "linux"
	out := map[string][]string{}
	var walk func(rel string)
	walk = func(rel string) {
		if _, done := out[rel]; done {
			return
		}
		p, err := ctx.ImportDir(filepath.Join(root, filepath.FromSlash(rel)), 0)
		if err != nil {
			t.Fatalf("read package %s: %v", rel, err)
		}
		out[rel] = []string{}
		for _, imp := range p.Imports {
			if dep, ok := strings.CutPrefix(imp, module+"/"); ok {
				out[rel] = append(out[rel], dep)
				walk(dep)
			}
		}
	}
	walk("cmd/hbx")
	return out
}

// TestProductHasNoTestHooks: the binary `make build` makes links no
// test-only package, and its one package of test hooks (internal/killpoint)
// imports nothing there, so it can read no environment variable and send no
// signal: HBXTEST_KILL_AT and HBXTEST_HOLD_AT do nothing in a product hbx.
// Built with the tag hbxtest (the e2e build), the same package does read
// them (its files import os and syscall), so the tag is what arms them.
func TestProductHasNoTestHooks(t *testing.T) {
	root := testenv.RepoRoot(t)
	prod := product(t, root, productTags)
	if _, ok := prod[hooks]; !ok {
		t.Fatalf("the product does not link %s: renamed? update hooks", hooks)
	}
	for pkg := range prod {
		for _, to := range testOnly {
			if pkg == to || strings.HasPrefix(pkg, to+"/") {
				t.Errorf("the product links test-only package %s (imported from: %v)", pkg, importers(prod, pkg))
			}
		}
	}
	ctx := build.Default
	ctx.BuildTags = productTags
	p, err := ctx.ImportDir(filepath.Join(root, hooks), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Imports) != 0 {
		t.Errorf("%s imports %v in the product build (files %v): its hooks must be inert without tag %s", hooks, p.Imports, p.GoFiles, killpoint.Tag)
	}
	ctx.BuildTags = append(slices.Clone(productTags), killpoint.Tag)
	armed, err := ctx.ImportDir(filepath.Join(root, hooks), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"os", "syscall"} {
		if !slices.Contains(armed.Imports, want) {
			t.Errorf("%s with tag %s imports %v, want %s among them (files %v)", hooks, killpoint.Tag, armed.Imports, want, armed.GoFiles)
		}
	}
}

// importers lists the packages of prod that import pkg.
func importers(prod map[string][]string, pkg string) []string {
	var out []string
	for from, deps := range prod {
		if slices.Contains(deps, pkg) {
			out = append(out, from)
		}
	}
	slices.Sort(out)
	return out
}
