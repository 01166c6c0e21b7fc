package boundary

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv"
)

// datadirOwner is the one package that spells the names beside a data
// directory (the lock, the restore journal and staging, the pre-restore
// and rolled-back copies).
const datadirOwner = "internal/datadir"

// siblingSpellings begin the string literals that would name a sibling of
// a data directory by hand: <dir>.restore-..., <dir>.pre-restore-...,
// <dir>.rolled-back-..., <dir>.restore.json, .<dir>.lock.owner.
var siblingSpellings = []string{".restore-", ".pre-restore", ".rolled-back", ".restore.json", ".owner"}

// TestDataDirNamesHaveOneHome: no product code outside internal/datadir
// holds a string literal that starts like a name beside the data
// directory, so each name is spelled once and every user reads it from
// there. Tests may spell them (they check what is on disk); help texts and
// messages that mention them in a sentence do not start with them.
func TestDataDirNamesHaveOneHome(t *testing.T) {
	root := testenv.RepoRoot(t)
	fset := token.NewFileSet()
	for _, p := range testenv.GoFiles(t, root) {
		rel := filepath.ToSlash(p[len(root)+1:])
		if strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(rel, datadirOwner+"/") || strings.HasPrefix(rel, "e2e/") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", rel, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for _, sp := range siblingSpellings {
				if strings.HasPrefix(s, sp) {
					t.Errorf("%s: string %q spells a name beside the data directory: use %s", fset.Position(lit.Pos()), s, datadirOwner)
				}
			}
			return true
		})
	}
}
