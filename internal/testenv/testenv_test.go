// SPDX-License-Identifier: Apache-2.0

package testenv_test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
)

func TestStartRegistry(t *testing.T) {
	r := testenv.StartRegistry(t)
	if !strings.HasPrefix(r.Host(), "127.0.0.1:") {
		t.Errorf("Host() = %q, want 127.0.0.1:PORT", r.Host())
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(r.URL() + "/v2/")
	if err != nil {
		t.Fatalf("GET /v2/: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v2/ = %s, want 200", resp.Status)
	}
	if got := resp.Header.Get("Docker-Distribution-Api-Version"); got != "registry/2.0" {
		t.Errorf("Docker-Distribution-Api-Version = %q, want registry/2.0", got)
	}

	start := time.Now()
	if err := r.Stop(); err != nil {
		t.Fatalf("Stop() = %v", err)
	}
	t.Logf("registry stopped in %v", time.Since(start))
	if err := r.Stop(); err != nil {
		t.Errorf("second Stop() = %v, want nil", err)
	}
	if resp, err := client.Get(r.URL() + "/v2/"); err == nil {
		resp.Body.Close()
		t.Fatalf("GET /v2/ after Stop = %s, want a connection error", resp.Status)
	}
}

func TestStartTwo(t *testing.T) {
	if _, err := os.Stat(testenv.RegistryBinary); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	a, err := testenv.Start(t.TempDir())
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	defer a.Close()
	b, err := testenv.Start(t.TempDir())
	if err != nil {
		t.Fatalf("second Start() = %v", err)
	}
	defer b.Close()
	if a.Host() == b.Host() {
		t.Errorf("two registries on one address %s", a.Host())
	}
}

func TestFindRepoRoot(t *testing.T) {
	root := testenv.RepoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("RepoRoot() = %s without go.mod: %v", root, err)
	}
	got, err := testenv.FindRepoRoot(filepath.Join(root, "internal", "testenv"))
	if err != nil || got != root {
		t.Errorf("FindRepoRoot(internal/testenv) = %q, %v, want %q, nil", got, err, root)
	}
	if got, err := testenv.FindRepoRoot(t.TempDir()); err == nil {
		// A go.mod above the temporary directory is possible, but not this one.
		if got == root {
			t.Errorf("FindRepoRoot(temp dir) = %q, want another directory or an error", got)
		}
	}
}

// TestUnavailable: a child that reports a missing dependency skips, or
// fails under CI=true and HBXTEST_E2E=1, naming scripts/testdeps.sh.
func TestUnavailable(t *testing.T) {
	if os.Getenv("HBXTEST_UNAVAILABLE_CHILD") == "1" {
		testenv.Unavailable(t, "frobnicator missing")
		t.Fatal("Unavailable returned")
	}
	checkReporter(t, "TestUnavailable", "HBXTEST_UNAVAILABLE_CHILD=1", "frobnicator missing (run scripts/testdeps.sh)", "")
}

// checkReporter re-runs the test binary's test name as a child with
// childEnv set (and CI, HBXTEST_E2E as each case says) and checks the
// child skips, or fails under CI=true and HBXTEST_E2E=1, printing want
// and, when notWant is not "", not printing notWant.
func checkReporter(t *testing.T, name, childEnv, want, notWant string) {
	t.Helper()
	for _, tc := range []struct {
		env      []string
		wantFail bool
	}{
		{nil, false},
		{[]string{"CI=true"}, true},
		{[]string{"HBXTEST_E2E=1"}, true},
		{[]string{"CI=false", "HBXTEST_E2E=0"}, false},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, "HBXTEST_E2E=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, childEnv)
		cmd.Env = append(cmd.Env, tc.env...)
		out, err := cmd.CombinedOutput()
		verdict := "--- SKIP"
		if tc.wantFail {
			verdict = "--- FAIL"
		}
		bad := notWant != "" && strings.Contains(string(out), notWant)
		if (err != nil) != tc.wantFail || !strings.Contains(string(out), verdict) || !strings.Contains(string(out), want) || bad {
			t.Errorf("%s child with %q: %v, want %s printing %q (and not %q); output:\n%s", name, tc.env, err, verdict, want, notWant, out)
		}
	}
}
