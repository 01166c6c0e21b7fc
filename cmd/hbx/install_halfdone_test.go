package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/release"
)

// treeOf lists every path under dir with its type, size and mtime.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fmt.Sprint(fi.Mode(), fi.ModTime(), fi.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInstallRefusesHalfDoneUpgrade proves that hbx install, with an
// upgrade half done (upgrade.json in phase activating, a release it
// names staged under releases/), refuses with exit 1 before anything,
// registry or disk: the error names the change, `hbx rollback` and
// `hbx supervise` and says nothing changed, and the runtime directory is
// exactly as it was (no lock file, tmp/ or cleanup: the release the
// recovery needs stays). While a command holds the runtime directory's
// lock making the change, it says the change is in progress instead.
// Before, the install went on (here: to the registry) and its cleanup
// could remove that release.
func TestInstallRefusesHalfDoneUpgrade(t *testing.T) {
	dir := t.TempDir()
	runtimeDir := filepath.Join(dir, "runtime")
	staged := filepath.Join(runtimeDir, "releases", strings.Repeat("c", 64))
	if err := os.MkdirAll(staged, 0o755); err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(testImage, ":v2@", ":v3@", 1)
	j := `{"format": 1, "phase": "activating", "old": {"image": "` + testImage + `"}, "new": {"image": "` + other + `", "manifest_digest": "sha256:` + strings.Repeat("c", 64) + `"}, "started": "2026-12-01T10:00:00Z", "updated": "2026-12-01T10:00:01Z"}`
	if err := os.WriteFile(filepath.Join(runtimeDir, "upgrade.json"), []byte(j), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, "executor:\n  image: \""+testImage+"\"\n  runtime_dir: "+runtimeDir+"\n  data_dir: "+filepath.Join(dir, "data")+
		"\n  state_dir: "+filepath.Join(dir, "state")+"\nsupervisor:\n  socket: "+filepath.Join(dir, "s.sock")+"\n")
	// --from names a file (checked before anything else, exit 2 when
	// missing), not an image: the refusal comes before it is read.
	if err := os.WriteFile(filepath.Join(dir, "image.tar"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	before := treeOf(t, runtimeDir)
	for _, args := range [][]string{{"install"}, {"install", "--from", filepath.Join(dir, "image.tar")}, {"install", "--verify"}} {
		_, _, code, err := runTest(t, nil, append([]string{"--config", path}, args...)...)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		for _, w := range []string{"install: an upgrade is half done: ", "from " + testImage + " to " + other, "interrupted in phase activating", "`hbx rollback`", "`hbx supervise`", "nothing changed"} {
			if !strings.Contains(msg, w) {
				t.Errorf("hbx %s = %q, want it to say %q", strings.Join(args, " "), msg, w)
			}
		}
		if code != exitFailure {
			t.Errorf("hbx %s exit %d, want %d", strings.Join(args, " "), code, exitFailure)
		}
		after := treeOf(t, runtimeDir)
		if len(after) != len(before) {
			t.Errorf("hbx %s changed the runtime directory: %d entries, %d before", strings.Join(args, " "), len(after), len(before))
		}
		for p, v := range before {
			if after[p] != v {
				t.Errorf("hbx %s changed %s", strings.Join(args, " "), p)
			}
		}
	}
	// In progress: a live command holds the lock.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, err := release.LockExisting(ctx, runtimeDir, "hbx upgrade", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock()
	_, _, code, err := runTest(t, nil, "--config", path, "install")
	if code != exitFailure || err == nil || !strings.Contains(err.Error(), "an upgrade is half done: ") || !strings.Contains(err.Error(), "is in progress (phase activating") {
		t.Errorf("hbx install while the change holds the lock = %v (exit %d), want exit 1 saying it is in progress", err, code)
	}
}
