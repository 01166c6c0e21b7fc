package datalock

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestPlantedSymlinkFollowsNothing: whoever can write the data
// directory's parent (a careless operator gave it to executor.user) plants
// the lock files as symlinks to a file of the host. Acquire refuses and
// the file keeps its bytes: it used to open through the link, truncate the
// target and write its holder record into it, as root.
func TestPlantedSymlinkFollowsNothing(t *testing.T) {
	for _, planted := range []string{".data.lock", ".data.lock.owner"} {
		t.Run(planted, func(t *testing.T) {
			dir := t.TempDir()
			victim := filepath.Join(t.TempDir(), "authorized_keys")
			if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, filepath.Join(dir, planted)); err != nil {
				t.Fatal(err)
			}
			l, err := Acquire(context.Background(), filepath.Join(dir, "data"), Options{Command: "test"})
			if err == nil {
				l.Release()
				t.Errorf("Acquire() through a planted %s symlink = nil, want an error", planted)
			}
			if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
				t.Fatalf("the symlink's target now holds %q", b)
			}
		})
	}
}
