package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWritePinThroughSymlink: a config file that is a symlink (kept in a
// checkout, linked from /etc/hbx/hbx.yaml) gets the pin written to its
// target; the link stays a link. Renaming over the link replaced it with
// a copy, so later edits of the real file were silently ignored.
func TestWritePinThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "repo", "hbx.yaml")
	if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(real, []byte("executor:\n  port: 4000\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "etc", "hbx.yaml")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../repo/hbx.yaml", link); err != nil {
		t.Fatal(err)
	}
	if err := WritePin(link, pinImage, "linux/amd64", pinManifest); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("%s is no longer a symlink after WritePin (%v)", link, err)
	}
	b, err := os.ReadFile(real)
	if err != nil || !strings.Contains(string(b), pinManifest) {
		t.Errorf("the link's target holds %q, %v; want the pin %s", b, err, pinManifest)
	}
}
