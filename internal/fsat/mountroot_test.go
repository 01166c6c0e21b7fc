package fsat

import (
	"os"
	"path/filepath"
	"testing"
)

func TestIsMountRoot(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/proc", link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		want bool
	}{
		{"/", true},
		{"/proc", true}, // procfs is mounted there
		{dir, false},
		{link, false}, // the link itself, not the mount it names
	} {
		got, err := IsMountRoot(tt.path)
		if err != nil || got != tt.want {
			t.Errorf("IsMountRoot(%s) = %v, %v; want %v", tt.path, got, err, tt.want)
		}
	}
	if _, err := IsMountRoot(filepath.Join(dir, "missing")); err == nil {
		t.Errorf("IsMountRoot(missing) = nil error, want one")
	}
}
