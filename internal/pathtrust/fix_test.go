package pathtrust

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv"
)

// TestFixForARunAsAnotherUser: a run of hbx as neither root nor the
// owner of a directory the box gave executor.user is told to run as root,
// not to make the directory root's (which would break the payload); a
// run as root keeps the chown advice, and /tmp itself the "directory of
// its own" one.
func TestFixForARunAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to chown")
	}
	dir := t.TempDir()
	owned := filepath.Join(dir, "data")
	if err := os.Mkdir(owned, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(owned, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	rootDir := filepath.Join(dir, "root")
	if err := os.Mkdir(rootDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(rootDir, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		path string
		self bool
		euid int
		want string
	}{
		{"another user's dir, hbx as a third user", owned, true, 1000, "run hbx as root (it runs as uid 1000"},
		{"another user's dir, hbx as root", owned, true, 0, "make it root's and writable by root alone"},
		{"root's world-writable dir, hbx as a user", rootDir, true, 1000, "make it root's and writable by root alone"},
		{"the shared /tmp itself", "/tmp", true, 0, "use a directory of its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := os.Lstat(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if got := fixFor(st, tc.self, tc.euid); !strings.Contains(got, tc.want) {
				t.Errorf("fixFor(%s, %v, %d) = %q, want %q in it", tc.path, tc.self, tc.euid, got, tc.want)
			}
		})
	}
}
