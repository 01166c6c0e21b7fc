package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFromFlag: install, upgrade and restore take --from PATH and say so
// in their help; an install from a path that does not exist fails (exit
// 1) naming it, and creates no release.
func TestFromFlag(t *testing.T) {
	for _, cmd := range []string{"install", "upgrade", "restore"} {
		out, _, _, err := runTest(t, nil, cmd, "--help")
		if err != nil || !strings.Contains(out, "--from") || !strings.Contains(out, "OCI archive") {
			t.Errorf("hbx %s --help = %v, want it to document --from with OCI archives:\n%s", cmd, err, out)
		}
	}
	dir := t.TempDir()
	runtimeDir := filepath.Join(dir, "runtime")
	path := writeConfig(t, "executor:\n  image: \""+testImage+"\"\n  runtime_dir: "+runtimeDir+"\n  data_dir: "+filepath.Join(dir, "data")+
		"\n  state_dir: "+filepath.Join(dir, "state")+"\nsupervisor:\n  socket: "+filepath.Join(dir, "s.sock")+"\n")
	missing := filepath.Join(dir, "image.tar")
	_, _, code, err := runTest(t, nil, "--config", path, "install", "--from", missing)
	if code != exitFailure || err == nil || !strings.Contains(err.Error(), missing+": not usable: it does not exist") {
		t.Fatalf("hbx install --from missing = %v (exit %d), want exit 1 naming %s", err, code, missing)
	}
	if _, err := os.Stat(filepath.Join(runtimeDir, "releases")); err == nil {
		t.Errorf("a refused install created releases/")
	}
}
