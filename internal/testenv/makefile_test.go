package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakeHelpListsEveryTarget: every target of the Makefile says what it
// does (a "## " description on its rule line), is .PHONY, and `make help`
// lists it with that description, one line each.
func TestMakeHelpListsEveryTarget(t *testing.T) {
	root := RepoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	phony := regexp.MustCompile(`(?m)^\.PHONY:(.*)$`).FindSubmatch(mk)
	if phony == nil {
		t.Fatal("Makefile has no .PHONY line")
	}
	phonies := strings.Fields(string(phony[1]))
	rules := regexp.MustCompile(`(?m)^([a-zA-Z0-9_-]+):([^=\n][^\n]*)?$`).FindAllSubmatch(mk, -1)
	if len(rules) < 10 {
		t.Fatalf("found %d targets in the Makefile, want the usual dozen or more", len(rules))
	}
	if _, err := exec.LookPath("make"); err != nil {
		Unavailable(t, "make: "+err.Error())
	}
	cmd := exec.Command("make", "-s", "--no-print-directory", "help")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make help: %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	for _, r := range rules {
		name := string(r[1])
		_, desc, ok := strings.Cut(string(r[2]), "## ")
		if !ok || strings.TrimSpace(desc) == "" {
			t.Errorf("target %s has no \"## description\" on its rule line", name)
			continue
		}
		if !strings.Contains(" "+strings.Join(phonies, " ")+" ", " "+name+" ") {
			t.Errorf("target %s is not .PHONY", name)
		}
		want := regexp.MustCompile(`^\s+` + regexp.QuoteMeta(name) + `\s+` + regexp.QuoteMeta(strings.TrimSpace(desc)) + `$`)
		found := false
		for _, l := range lines {
			if want.MatchString(l) {
				found = true
			}
		}
		if !found {
			t.Errorf("make help does not list %s with %q:\n%s", name, strings.TrimSpace(desc), out)
		}
	}
}
