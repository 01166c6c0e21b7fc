package config

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// readmeKeys returns the config keys the README's configuration table
// names. A first cell lists keys in backquotes; a name without a dot
// continues the section of the name before it (`executor.listen` / `port`).
func readmeKeys(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n## Configuration\n")
	if start < 0 {
		t.Fatal("docs/configuration.md has no ## Configuration section")
	}
	text = text[start+1:]
	if end := strings.Index(text, "\n## "); end >= 0 {
		text = text[:end]
	}
	code := regexp.MustCompile("`([^`]+)`")
	keys := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.TrimSpace(cells[2]) == "" {
			t.Errorf("README config row without a default: %s", line)
			continue
		}
		section := ""
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			name := m[1]
			if i := strings.IndexByte(name, '.'); i >= 0 {
				section = name[:i]
			} else if section != "" {
				name = section + "." + name
			}
			keys[name] = true
		}
	}
	return keys
}

// TestREADMETableListsEveryKey keeps docs/configuration.md's configuration table
// complete: every key of keySpecs has a row.
func TestREADMETableListsEveryKey(t *testing.T) {
	keys := readmeKeys(t)
	for _, s := range keySpecs {
		if !keys[s.name] {
			t.Errorf("docs/configuration.md's configuration table lacks %s", s.name)
		}
	}
	for k := range keys {
		if _, ok := lookupKey(k); !ok && !strings.HasPrefix(k, "programs.") {
			t.Errorf("docs/configuration.md's configuration table names %s, which is not a key", k)
		}
	}
}
