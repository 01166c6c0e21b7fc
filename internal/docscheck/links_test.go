package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// linkRE matches an inline Markdown link or image, [text](target), and
// captures its target up to the first space or closing parenthesis.
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// codeSpanRE matches an inline code span; links inside one are text.
var codeSpanRE = regexp.MustCompile("`+[^`]*`+")

// pageLines returns the lines of a Markdown page, one for one, with fenced
// code blocks and inline code spans blanked out.
func pageLines(text string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		fence := strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")
		if fence {
			fenced = !fenced
		}
		if fence || fenced {
			out = append(out, "")
			continue
		}
		out = append(out, codeSpanRE.ReplaceAllString(line, "``"))
	}
	return out
}

// slug returns GitHub's anchor for a heading's text: lower case, letters,
// digits, spaces, hyphens and underscores kept, the rest dropped, spaces
// turned into hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors returns the heading anchors of a Markdown page, with GitHub's
// -1, -2 ... suffixes for repeated headings.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		s := slug(heading)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// brokenLinks returns one line for each relative link of the pages (paths
// relative to root) whose file or anchor does not exist.
func brokenLinks(root string, pages []string) ([]string, error) {
	var broken []string
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			return nil, fmt.Errorf("read page: %w", err)
		}
		for i, line := range pageLines(string(b)) {
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				if msg := checkLink(root, page, string(b), m[1]); msg != "" {
					broken = append(broken, fmt.Sprintf("%s: link %q: %s (line %d)", page, m[1], msg, i+1))
				}
			}
		}
	}
	return broken, nil
}

// checkLink says what is wrong with one link target of page (whose text is
// self), or "" when it resolves.
func checkLink(root, page, self, target string) string {
	for _, scheme := range []string{"http://", "https://", "mailto:"} {
		if strings.HasPrefix(target, scheme) {
			return ""
		}
	}
	file, anchor, _ := strings.Cut(target, "#")
	text := self
	if file != "" {
		if filepath.IsAbs(file) {
			return "an absolute path, not relative"
		}
		path := filepath.Join(root, filepath.Dir(page), file)
		rel, err := filepath.Rel(root, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			return "leads out of the repository"
		}
		info, err := os.Stat(path)
		if err != nil {
			return "no such file"
		}
		if anchor == "" {
			return ""
		}
		if info.IsDir() || !strings.HasSuffix(file, ".md") {
			return "an anchor into something that is not a Markdown page"
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "unreadable: " + err.Error()
		}
		text = string(b)
	}
	if anchor != "" && !anchors(text)[anchor] {
		return "no heading with anchor #" + anchor
	}
	return ""
}

// operatorPages returns README.md and every docs/*.md, relative to root.
func operatorPages(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, rel)
	}
	return pages
}

// TestOperatorDocsLinksResolve fails on a relative link or anchor of
// README.md or docs/*.md that leads nowhere.
func TestOperatorDocsLinksResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	pages := operatorPages(t, root)
	if len(pages) < 2 {
		t.Fatalf("operatorPages = %v, want README.md and the docs/ pages", pages)
	}
	broken, err := brokenLinks(root, pages)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range broken {
		t.Error(b)
	}
}

// TestBrokenLinksFindsEachKind proves the checker on a small tree: each
// kind of broken link is reported, and good links are not.
func TestBrokenLinksFindsEachKind(t *testing.T) {
	tests := []struct {
		name, page string
		wantBroken bool
	}{
		{"file exists", "[a](docs/a.md)", false},
		{"directory exists", "[d](docs/)", false},
		{"heading anchor", "[a](docs/a.md#exit-codes)", false},
		{"repeated heading", "[a](docs/a.md#notes-1)", false},
		{"punctuation dropped", "[a](docs/a.md#how-hbx-install-works)", false},
		{"own anchor", "# Top\n[t](#top)", false},
		{"web link", "[w](https://example.com/x)", false},
		{"inside code span", "`[x](missing.md)`", false},
		{"inside fence", "```\n[x](missing.md)\n```", false},
		{"missing file", "[x](missing.md)", true},
		{"missing anchor", "[a](docs/a.md#nowhere)", true},
		{"missing own anchor", "[t](#nowhere)", true},
		{"anchor into a non-page", "[g](docs/x.go#l1)", true},
		{"out of the repository", "[x](../../etc/passwd)", true},
		{"absolute path", "[x](/etc/passwd)", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.Mkdir(filepath.Join(root, "docs"), 0o755); err != nil {
				t.Fatal(err)
			}
			a := "# A\n\n## Exit codes\n\n## How `hbx install` works\n\n## Notes\n\n## Notes\n"
			for name, text := range map[string]string{"docs/a.md": a, "docs/x.go": "package x\n", "README.md": tt.page + "\n"} {
				if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			broken, err := brokenLinks(root, []string{"README.md"})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(broken) > 0; got != tt.wantBroken {
				t.Errorf("brokenLinks(%q) = %q, want broken %v", tt.page, broken, tt.wantBroken)
			}
		})
	}
}

// TestBrokenLinksUnreadablePage proves a page that cannot be read is an
// error, not a pass.
func TestBrokenLinksUnreadablePage(t *testing.T) {
	if _, err := brokenLinks(t.TempDir(), []string{"README.md"}); err == nil {
		t.Error("brokenLinks(missing README.md) = nil error, want one")
	}
}
