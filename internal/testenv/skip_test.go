// SPDX-License-Identifier: Apache-2.0

package testenv_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
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
		if !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
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
		return nil
	})
	if err != nil {
		t.Fatalf("read the module's test files: %v", err)
	}
}

// TestMissing re-runs itself as a child that reports a missing
// prerequisite, and checks the child skips, or fails under CI=true and
// HBXTEST_E2E=1, with the message as given (no testdeps.sh remedy).
func TestMissing(t *testing.T) {
	if os.Getenv("HBXTEST_MISSING_CHILD") == "1" {
		testenv.Missing(t, "frobnicator is not installed (apt-get install frob)")
		t.Fatal("Missing returned")
	}
	for _, tc := range []struct {
		env      []string
		wantFail bool
	}{
		{nil, false},
		{[]string{"CI=true"}, true},
		{[]string{"HBXTEST_E2E=1"}, true},
		{[]string{"CI=false", "HBXTEST_E2E=0"}, false},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissing$", "-test.v")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, "HBXTEST_E2E=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "HBXTEST_MISSING_CHILD=1")
		cmd.Env = append(cmd.Env, tc.env...)
		out, err := cmd.CombinedOutput()
		want := "--- SKIP"
		if tc.wantFail {
			want = "--- FAIL"
		}
		msg := "frobnicator is not installed (apt-get install frob)"
		if (err != nil) != tc.wantFail || !strings.Contains(string(out), want) || !strings.Contains(string(out), msg) || strings.Contains(string(out), "testdeps.sh") {
			t.Errorf("child with %q: %v, want %s with %q and no testdeps.sh; output:\n%s", tc.env, err, want, msg, out)
		}
	}
}
