// SPDX-License-Identifier: Apache-2.0

package testenv_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv"
)

// skipMarker is the comment that lets a test skip directly: what it lacks
// is not a prerequisite any install provides.
const skipMarker = "not a missing prerequisite"

// TestNoSilentSkip: every t.Skip, t.Skipf and t.SkipNow in the module's
// test files carries the comment "not a missing prerequisite: ..." on its
// line or just above it. A test that lacks a tool, root or a service calls
// testenv.Missing or testenv.Unavailable instead, so CI fails it rather
// than passing without running it.
func TestNoSilentSkip(t *testing.T) {
	root := testenv.RepoRoot(t)
	fset := token.NewFileSet()
	for _, p := range testenv.GoFiles(t, root) {
		if !strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			t.Fatalf("read the module's test files: %v", err)
		}
		marked := map[int]bool{} // lines a marker comment ends on
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if strings.Contains(strings.ToLower(c.Text), skipMarker) {
					marked[fset.Position(c.End()).Line] = true
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch sel.Sel.Name {
			case "Skip", "Skipf", "SkipNow":
			default:
				return true
			}
			pos := fset.Position(call.Pos())
			if !marked[pos.Line] && !marked[pos.Line-1] {
				rel, _ := filepath.Rel(root, pos.Filename)
				t.Errorf("%s:%d: %s skips silently: call testenv.Missing or testenv.Unavailable, or comment %q just above", rel, pos.Line, sel.Sel.Name, "// "+skipMarker+": why")
			}
			return true
		})
	}
}

// TestMissing: a child that reports a missing prerequisite skips, or fails
// under CI=true and HBXTEST_E2E=1, with the message as given (no
// testdeps.sh remedy).
func TestMissing(t *testing.T) {
	const msg = "frobnicator is not installed (apt-get install frob)"
	if os.Getenv("HBXTEST_MISSING_CHILD") == "1" {
		testenv.Missing(t, msg)
		t.Fatal("Missing returned")
	}
	checkReporter(t, "TestMissing", "HBXTEST_MISSING_CHILD=1", msg, "testdeps.sh")
}
