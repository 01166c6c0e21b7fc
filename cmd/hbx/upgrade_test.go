package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpgradeRefuses: bad references and flags are usage errors (exit 2)
// found before anything is read or written; without a supervisor or a
// recorded upgrade, upgrade and rollback fail (exit 1) and write nothing.
func TestUpgradeRefuses(t *testing.T) {
	dir := t.TempDir()
	runtimeDir := filepath.Join(dir, "runtime")
	pass := filepath.Join(dir, "pass")
	os.WriteFile(pass, []byte("secret\n"), 0o600)
	path := writeConfig(t, "executor:\n  image: \""+testImage+"\"\n  runtime_dir: "+runtimeDir+"\n  data_dir: "+filepath.Join(dir, "data")+
		"\n  state_dir: "+filepath.Join(dir, "state")+"\nsupervisor:\n  socket: "+filepath.Join(dir, "s.sock")+"\nbackup:\n  dir: "+filepath.Join(dir, "b")+"\n  passphrase_file: "+pass+"\n")
	other := strings.Replace(testImage, ":v2@", ":v3@", 1)
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no image", []string{"upgrade"}, 2, "image"},
		{"no digest", []string{"upgrade", "--image", "127.0.0.1:5000/hbx/executor:v3"}, 2, "no digest"},
		{"no tag", []string{"upgrade", "--image", "127.0.0.1:5000/hbx/executor@sha256:" + strings.Repeat("b", 64)}, 2, "no tag"},
		{"short digest", []string{"upgrade", "--image", "127.0.0.1:5000/hbx/executor:v3@sha256:abc"}, 2, "image"},
		{"bad platform digest", []string{"upgrade", "--image", other, "--platform-digest", "sha256:12"}, 2, "platform-digest"},
		{"no supervisor", []string{"upgrade", "--image", other}, 1, "no supervisor"},
		{"pin overridden by a flag", []string{"upgrade", "--image", other, "--executor-image", testImage}, 2, "overrides the config file"},
		{"nothing to roll back", []string{"rollback"}, 1, "no upgrade"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, code, err := runTest(t, nil, append([]string{"--config", path}, tc.args...)...)
			if code != tc.wantCode || err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("hbx %s = %v (exit %d), want exit %d mentioning %q", strings.Join(tc.args, " "), err, code, tc.wantCode, tc.wantErr)
			}
			for _, p := range []string{filepath.Join(runtimeDir, "upgrade.json"), filepath.Join(runtimeDir, "releases"), filepath.Join(dir, "b")} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("a refused command created %s", p)
				}
			}
		})
	}
}
