package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFromEmptyRefused: --from "" is a mistake (an unset variable), not a
// request for the registry: install, upgrade and restore refuse it with
// exit 2 before anything is read or written (issue 25 item 7).
func TestFromEmptyRefused(t *testing.T) {
	dir := t.TempDir()
	rt := filepath.Join(dir, "rt")
	cfg := writeConfig(t, "executor:\n  image: "+testImage+"\n  runtime_dir: "+rt+"\n  data_dir: "+filepath.Join(dir, "data")+"\n  state_dir: "+filepath.Join(dir, "state")+"\nbackup:\n  dir: "+filepath.Join(dir, "b")+"\n")
	for _, args := range [][]string{
		{"install", "--from", ""},
		{"install", "--from="},
		{"install", "--from", " "},
		{"upgrade", "--from", ""},
		{"restore", filepath.Join(dir, "x.tar.gz"), "--from", ""},
	} {
		_, _, code, err := runTest(t, []string{"PATH=/bin"}, append(args, "--config", cfg)...)
		if code != 2 || err == nil || !strings.Contains(err.Error(), "--from needs a PATH") {
			t.Errorf("hbx %q = %d, %v; want exit 2, --from needs a PATH", args, code, err)
		}
	}
	if _, err := os.Stat(rt); !os.IsNotExist(err) {
		t.Errorf("runtime directory made: %v", err)
	}
}
