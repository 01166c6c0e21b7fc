package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFromFlag: install, upgrade and restore take --from PATH and say so
// in their help; an install from a path that does not exist is refused
// (exit 2) naming it, and creates no release.
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
	if code != exitUsage || err == nil || !strings.Contains(err.Error(), missing+": not usable: it does not exist") {
		t.Fatalf("hbx install --from missing = %v (exit %d), want exit 2 naming %s", err, code, missing)
	}
	if _, err := os.Stat(filepath.Join(runtimeDir, "releases")); err == nil {
		t.Errorf("a refused install created releases/")
	}
}

// TestInstallOfflineHint: a plain hbx install that finds no registry (the
// connection refused) ends with the one hint of how to go on offline;
// an install --from does not get it.
func TestInstallOfflineHint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	image := strings.Replace(testImage, "127.0.0.1:5000", closed, 1)
	dir := t.TempDir()
	path := writeConfig(t, "executor:\n  image: \""+image+"\"\n  runtime_dir: "+filepath.Join(dir, "runtime")+"\n  data_dir: "+filepath.Join(dir, "data")+
		"\n  state_dir: "+filepath.Join(dir, "state")+"\nsupervisor:\n  socket: "+filepath.Join(dir, "s.sock")+"\nregistry:\n  insecure_hosts: [\""+closed+"\"]\n")
	const hint = "; offline: hbx install --from FILE (see docs/install.md#offline-install)"
	_, _, code, err := runTest(t, nil, "--config", path, "install")
	if code != exitFailure || err == nil || !strings.HasSuffix(err.Error(), hint) || strings.Count(err.Error(), "offline:") != 1 {
		t.Errorf("hbx install, registry refusing connections = %v (exit %d), want exit 1 ending %q", err, code, hint)
	}
	_, _, _, err = runTest(t, nil, "--config", path, "install", "--from", filepath.Join(dir, "none"))
	if err == nil || strings.Contains(err.Error(), "offline:") {
		t.Errorf("hbx install --from missing = %v, want no offline hint", err)
	}
}
