package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDemoInstallsOnlyItsDeps: `make demo` and scripts/demo.sh install
// only what the demo runs on (scripts/testdeps.sh --demo: the registry
// and Bun), not the
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

	demo, err := os.ReadFile(filepath.Join(root, "scripts/demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range regexp.MustCompile(`(?m)^[^#\n]*scripts/testdeps\.sh.*$`).FindAll(demo, -1) {
		if !strings.Contains(string(call), "testdeps.sh --demo") {
			t.Errorf("scripts/demo.sh runs the full testdeps.sh: %s", call)
		}
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

// TestDemoFailureNamesOnlyItsFiles: a demo that fails before it made its
// run directory (here: go is not on PATH) does not point at a .run/demo/
// that does not exist or is an earlier run's (issue 25 item 8): run from
// the repository, and from a copy of the script beside an earlier run's
// logs (the README runs the demo before make check: a fresh clone's make
// check met its logs).
func TestDemoFailureNamesOnlyItsFiles(t *testing.T) {
	root := RepoRoot(t)
	for _, p := range []string{"/usr/bin/go", "/bin/go"} {
		if _, err := os.Stat(p); err == nil {
			Missing(t, p+" exists, so PATH cannot leave go out")
		}
	}
	script, err := os.ReadFile(filepath.Join(root, "scripts/demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	earlier := t.TempDir()
	for _, f := range []string{"scripts/demo.sh", ".run/demo/executor.log", ".run/demo/mktestimage.log"} {
		body := []byte("an earlier run's line\n")
		if f == "scripts/demo.sh" {
			body = script
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(earlier, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(earlier, f), body, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{root, earlier} {
		c := exec.Command("bash", filepath.Join(dir, "scripts/demo.sh"))
		c.Env = []string{"PATH=" + t.TempDir() + ":/usr/bin:/bin", "HOME=" + t.TempDir()}
		out, err := c.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "go is missing") {
			t.Fatalf("%s/scripts/demo.sh without go = %v\n%s; want it to fail on go", dir, err, out)
		}
		if strings.Contains(string(out), ".run/demo") || strings.Contains(string(out), "an earlier run's line") {
			t.Errorf("%s/scripts/demo.sh failed before making its files but points at them:\n%s", dir, out)
		}
	}
}
