// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Strict reports whether missing test dependencies are failures rather than
// skips: when HBXTEST_E2E=1 (make e2e) or CI=true.
func Strict() bool {
	return os.Getenv("HBXTEST_E2E") == "1" || os.Getenv("CI") == "true"
}

// Unavailable reports a missing test dependency described by msg: it fails
// the test under [Strict] and skips it otherwise. msg should say what is
// missing; Unavailable adds the remedy, scripts/testdeps.sh.
func Unavailable(t testing.TB, msg string) {
	t.Helper()
	Missing(t, msg+" (run scripts/testdeps.sh)")
}

// Missing reports a missing prerequisite that scripts/testdeps.sh does not
// provide (a host tool from a Debian package, root): it fails the test
// under [Strict] and skips it otherwise. msg says what is missing and the
// remedy ("gpg is not installed (apt-get install gnupg)", "needs root to
// chown"); Missing adds nothing to it but, when failing, why it fails.
// A test calls Missing, never t.Skip, for a missing prerequisite, so CI
// refuses the skip (TestNoSilentSkip).
func Missing(t testing.TB, msg string) {
	t.Helper()
	if Strict() {
		t.Fatal(msg + "; failing, not skipping, as HBXTEST_E2E=1 or CI=true")
	}
	t.Skip(msg)
}

// RepoRoot returns the repository root: the nearest directory at or above
// the working directory that holds go.mod. It fails the test if there is
// none.
func RepoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("RepoRoot: %v", err)
	}
	root, err := FindRepoRoot(wd)
	if err != nil {
		t.Fatalf("RepoRoot: %v", err)
	}
	return root
}

// GoFiles returns the paths of the module's .go files under root (test
// files included, whatever their build tags), in lexical order, skipping
// the directories the go tool skips: testdata and names starting with "."
// or "_" (so .cache and .run too). It fails the test on a read error.
func GoFiles(t testing.TB, root string) []string {
	t.Helper()
	var files []string
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
		if strings.HasSuffix(name, ".go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list the Go files under %s: %v", root, err)
	}
	return files
}

// FindRepoRoot returns the nearest directory at or above dir that holds
// go.mod, as an absolute path.
func FindRepoRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		_, err := os.Stat(filepath.Join(d, "go.mod"))
		if err == nil {
			return d, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("find repository root: %w", err)
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("find repository root: no go.mod at or above %s", dir)
		}
	}
}
