package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoPathRE matches a code span that reads as a path inside the
// repository: two or more plain segments, such as `e2e/docker/` or
// `internal/datalock`. Placeholders (`<hex>`) and globs do not match.
var repoPathRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+/?$`)

// codeSpanTextRE captures the text of a single-backquote code span.
var codeSpanTextRE = regexp.MustCompile("`([^`\\s]+)`")

// generated are top-level directories that builds and runs create, absent
// from a fresh clone: a path under them is not checked.
var generated = map[string]bool{"bin": true, "dist": true}

// stalePaths returns one line for each code span of the pages that names a
// path under one of root's top-level entries (hidden and generated ones
// aside) that does not exist.
func stalePaths(root string, pages []string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("list the repository: %w", err)
	}
	top := map[string]bool{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") && !generated[e.Name()] {
			top[e.Name()] = true
		}
	}
	var stale []string
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			return nil, fmt.Errorf("read page: %w", err)
		}
		fenced := false
		for i, line := range strings.Split(string(b), "\n") {
			if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
				fenced = !fenced
				continue
			}
			if fenced {
				continue
			}
			for _, m := range codeSpanTextRE.FindAllStringSubmatch(line, -1) {
				p := m[1]
				if !repoPathRE.MatchString(p) || !top[strings.SplitN(p, "/", 2)[0]] {
					continue
				}
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					stale = append(stale, fmt.Sprintf("%s:%d: `%s` names no file or directory of the repository", page, i+1, p))
				}
			}
		}
	}
	return stale, nil
}

// TestOperatorDocsPathsExist fails when README.md or docs/*.md names a
// repository path (in a code span) that is gone, as after a rename.
func TestOperatorDocsPathsExist(t *testing.T) {
	root := filepath.Join("..", "..")
	stale, err := stalePaths(root, operatorPages(t, root))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stale {
		t.Error(s)
	}
}

// TestStalePathsFindsGonePaths proves the checker on a small tree.
func TestStalePathsFindsGonePaths(t *testing.T) {
	tests := []struct {
		name, page string
		wantStale  bool
	}{
		{"file exists", "see `pkg/a.go`", false},
		{"directory exists", "see `pkg/sub/`", false},
		{"file gone", "see `pkg/gone_test.go`", true},
		{"directory gone", "see `pkg/old/`", true},
		{"not a top-level entry", "under `releases/current`", false},
		{"placeholder", "`pkg/<hex>`", false},
		{"generated directory", "`dist/hbx-linux-arm64`", false},
		{"one segment", "`pkg`", false},
		{"absolute path", "`/pkg/gone`", false},
		{"inside a fence", "```\n`pkg/gone.go`\n```", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range []string{"pkg/sub", "dist"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for name, text := range map[string]string{"pkg/a.go": "package pkg\n", "README.md": tt.page + "\n"} {
				if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			stale, err := stalePaths(root, []string{"README.md"})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(stale) > 0; got != tt.wantStale {
				t.Errorf("stalePaths(%q) = %q, want stale %v", tt.page, stale, tt.wantStale)
			}
		})
	}
}
