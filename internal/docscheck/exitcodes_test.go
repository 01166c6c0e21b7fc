package docscheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// exitConstRE matches the names of cmd/hbx's exit-code constants.
var exitConstRE = regexp.MustCompile(`^exit[A-Z]`)

// codeExitCodes returns the values of the integer constants named exit*
// in the non-test Go files under dir.
func codeExitCodes(t *testing.T, dir string) []int {
	t.Helper()
	var codes []int
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !exitConstRE.MatchString(name.Name) || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.INT {
						continue
					}
					n, err := strconv.Atoi(lit.Value)
					if err != nil {
						return err
					}
					codes = append(codes, n)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(codes)
	return slices.Compact(codes)
}

// docExitCodes returns the codes of the "## Exit codes" table of a page:
// rows whose first cell is a number in backquotes.
func docExitCodes(text string) ([]int, bool) {
	start := strings.Index(text, "\n## Exit codes\n")
	if start < 0 {
		return nil, false
	}
	text = text[start+1:]
	if end := strings.Index(text[3:], "\n## "); end >= 0 {
		text = text[:end+3]
	}
	row := regexp.MustCompile("(?m)^\\| `([0-9]+)` \\|")
	var codes []int
	for _, m := range row.FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		codes = append(codes, n)
	}
	slices.Sort(codes)
	return slices.Compact(codes), true
}

// TestExitCodeTableMatchesCode fails when docs/configuration.md's exit-code
// table and cmd/hbx's exit* constants name different codes.
func TestExitCodeTableMatchesCode(t *testing.T) {
	root := filepath.Join("..", "..")
	code := codeExitCodes(t, filepath.Join(root, "cmd", "hbx"))
	if len(code) == 0 {
		t.Fatal("found no exit* integer constants under cmd/hbx: where did the exit-code table go? point this test there")
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc, ok := docExitCodes(string(b))
	if !ok {
		t.Fatal("docs/configuration.md has no ## Exit codes section")
	}
	if !slices.Equal(doc, code) {
		t.Errorf("docs/configuration.md's exit-code table names codes %v, cmd/hbx defines %v", doc, code)
	}
}

// TestDocExitCodes proves the table reader on small pages.
func TestDocExitCodes(t *testing.T) {
	tests := []struct {
		name, page string
		want       []int
		wantOK     bool
	}{
		{"codes in order", "# C\n\n## Exit codes\n\n| code | meaning |\n|---|---|\n| `0` | ok |\n| `1` | no |\n", []int{0, 1}, true},
		{"other rows ignored", "## Exit codes\n| `2` | usage |\n| the payload's | status |\n", []int{2}, true},
		{"next section not read", "## Exit codes\n| `0` | ok |\n\n## Other\n| `7` | not a code |\n", []int{0}, true},
		{"no section", "# C\n| `0` | ok |\n", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := docExitCodes("\n" + tt.page)
			if ok != tt.wantOK || !slices.Equal(got, tt.want) {
				t.Errorf("docExitCodes(%q) = %v, %v; want %v, %v", tt.page, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestCodeExitCodes proves the constant reader on a small package: only
// integer constants named exit*, test files skipped.
func TestCodeExitCodes(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a.go":      "package main\n\nconst (\n\texitOK = 0\n\texitFailure = 1\n\texitNotRunning = 3\n\texitHelp = `text`\n\tother = 9\n)\n",
		"b_test.go": "package main\n\nconst exitTest = 7\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := codeExitCodes(t, dir), []int{0, 1, 3}; !slices.Equal(got, want) {
		t.Errorf("codeExitCodes = %v, want %v", got, want)
	}
}
