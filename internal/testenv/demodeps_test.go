package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDemoInstallsOnlyItsDeps: `make demo` installs only what the demo
// runs on (scripts/testdeps.sh --demo: the registry and Bun), not the
// browser, skopeo or qemu-user that `make check` needs; testdeps.sh
// --demo says nothing about those and succeeds where the registry and
// the Bun tarballs are present.
func TestDemoInstallsOnlyItsDeps(t *testing.T) {
	root := RepoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	rule := regexp.MustCompile(`(?m)^demo:([^#\n]*).*\n((?:\t.*\n)*)`).FindSubmatch(mk)
	if rule == nil {
		t.Fatal("Makefile has no demo rule")
	}
	if prereqs := strings.Fields(string(rule[1])); strings.Contains(" "+strings.Join(prereqs, " ")+" ", " testdeps ") {
		t.Errorf("make demo depends on testdeps (%q), which installs Chromium, skopeo and qemu-user the demo does not run", prereqs)
	}
	if !strings.Contains(string(rule[2]), "scripts/testdeps.sh --demo") {
		t.Errorf("make demo's recipe %q does not run scripts/testdeps.sh --demo", rule[2])
	}

	for _, f := range []string{"/usr/bin/docker-registry", filepath.Join(root, ".cache/npm/oven-bun-linux-x64-1.3.14.tgz"), filepath.Join(root, ".cache/npm/oven-bun-linux-aarch64-1.3.14.tgz")} {
		if _, err := os.Stat(f); err != nil {
			Missing(t, f+" (scripts/testdeps.sh installs it)")
		}
	}
	out, err := exec.Command("bash", filepath.Join(root, "scripts/testdeps.sh"), "--demo").CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/testdeps.sh --demo: %v\n%s", err, out)
	}
	for _, not := range []string{"chromium", "skopeo", "qemu", "binfmt"} {
		if strings.Contains(string(out), not) {
			t.Errorf("scripts/testdeps.sh --demo mentions %s:\n%s", not, out)
		}
	}
}
