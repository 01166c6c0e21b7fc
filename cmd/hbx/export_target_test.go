package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExportRefusesTargetsInsideItsDirectories: hbx export FILE never
// writes over what hbx keeps (a kept blob, current/release.json, the
// data, a backup): a FILE inside the runtime, data, state or backup
// directory, also through a symlink, is refused with exit 2 and left as
// it was (issue 25 item 7).
func TestExportRefusesTargetsInsideItsDirectories(t *testing.T) {
	dir := t.TempDir()
	rt, data, state, backups := filepath.Join(dir, "rt"), filepath.Join(dir, "data"), filepath.Join(dir, "state"), filepath.Join(dir, "backups")
	for _, d := range []string{filepath.Join(rt, "current"), data, state, backups} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(rt, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, "executor:\n  image: "+testImage+"\n  runtime_dir: "+rt+"\n  data_dir: "+data+"\n  state_dir: "+state+"\nbackup:\n  dir: "+backups+"\n")
	tests := []struct {
		file, wantKey string // wantKey "": not refused for its place
	}{
		{filepath.Join(rt, "current", "release.json"), "executor.runtime_dir"},
		{filepath.Join(rt, "hbx.lock"), "executor.runtime_dir"},
		{filepath.Join(dir, "link", "blobs", "x"), "executor.runtime_dir"},
		{filepath.Join(data, "data.db"), "executor.data_dir"},
		{filepath.Join(state, "new", "x.tar"), "executor.state_dir"},
		{filepath.Join(backups, "x.tar"), "backup.dir"},
		{filepath.Join(dir, "rt.tar"), ""},
	}
	for _, tt := range tests {
		t.Run(strings.TrimPrefix(tt.file, dir), func(t *testing.T) {
			if err := os.MkdirAll(filepath.Dir(tt.file), 0o700); err == nil {
				os.WriteFile(tt.file, []byte("kept"), 0o600)
			}
			_, _, code, err := runTest(t, []string{"PATH=/bin"}, "export", tt.file, "--config", cfg)
			refused := err != nil && strings.Contains(err.Error(), "an export is written outside the directories hbx keeps")
			if tt.wantKey == "" {
				if refused {
					t.Errorf("hbx export %s = %v; want it not refused for its place", tt.file, err)
				}
				return
			}
			if code != 2 || !refused || !strings.Contains(err.Error(), "inside "+tt.wantKey) {
				t.Errorf("hbx export %s = %d, %v; want exit 2 naming %s", tt.file, code, err, tt.wantKey)
			}
			if b, _ := os.ReadFile(tt.file); string(b) != "kept" {
				t.Errorf("%s changed to %q", tt.file, b)
			}
		})
	}
}
