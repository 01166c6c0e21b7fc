package config

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEListsEveryProgramKey keeps the README's programs.<name>.* row
// complete: it names every field of programFields.
func TestREADMEListsEveryProgramKey(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `programs.<name>.*` |") {
			row = line
		}
	}
	if row == "" {
		t.Fatal("docs/configuration.md has no programs.<name>.* row")
	}
	for _, f := range programFieldNames() {
		if !strings.Contains(row, "`"+f+"`") {
			t.Errorf("docs/configuration.md's programs.<name>.* row lacks `%s`", f)
		}
	}
}
