package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPruneNoteSaidOnce: a command that prints its result says what the
// prune after its change freed once, in its result ("note: pruned old
// releases: ..."), not also in its log (hbx restore here; hbx upgrade,
// rollback and install print it the same way). Before, the adapter
// logged the note it returned, so make demo-upgrade's terminal showed
// "pruned old releases: nothing to remove" twice.
func TestPruneNoteSaidOnce(t *testing.T) {
	dir := t.TempDir()
	data, rt, backups := filepath.Join(dir, "data"), filepath.Join(dir, "runtime"), filepath.Join(dir, "backups")
	for _, d := range []string{data, rt} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(data, "data.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A registry on a closed loopback port: the restore's runtime step
	// fails at once, offline.
	image := "127.0.0.1:1/hbx/executor:v1@sha256:" + strings.Repeat("a", 64)
	cfg := writeConfig(t, "executor:\n  image: "+image+"\n  data_dir: "+data+"\n  runtime_dir: "+rt+"\nsupervisor:\n  socket: "+filepath.Join(dir, "none.sock")+"\nbackup:\n  dir: "+backups+"\nregistry:\n  retries: 0\n")
	if _, stderr, code, err := runTest(t, nil, "backup", "--no-encrypt", "--config", cfg); code != 0 {
		t.Fatalf("hbx backup = %d, %v\n%s", code, err, stderr)
	}
	archives, err := filepath.Glob(filepath.Join(backups, "*.tar.gz"))
	if err != nil || len(archives) != 1 {
		t.Fatalf("archives %q, %v; want one", archives, err)
	}
	stdout, stderr, code, err := runTest(t, nil, "restore", archives[0], "--data-only", "--without-runtime", "--config", cfg)
	t.Logf("hbx restore = %d, %v\n%s%s", code, err, stdout, stderr)
	if !strings.Contains(stdout, "note: pruned old releases: nothing to remove\n") {
		t.Errorf("hbx restore's result does not say what the prune freed:\n%s", stdout)
	}
	if n := strings.Count(stdout+stderr, "pruned old releases"); n != 1 {
		t.Errorf("hbx restore says \"pruned old releases\" %d times, want once:\n%s%s", n, stdout, stderr)
	}
}
