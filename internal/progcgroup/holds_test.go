package progcgroup

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv"
)

// TestHolds: membership is the exact cgroup path below the mount, not any
// path that ends the same way (a cgroup /hbx.x/p at the root is not
// /a/hbx.x/p).
func TestHolds(t *testing.T) {
	rel, ok := Of("/proc", os.Getpid())
	mount := Mount("/proc/self/mountinfo")
	if !ok || mount == "" {
		testenv.Missing(t, "no cgroup v2 hierarchy is mounted: membership cannot be read")
	}
	self := filepath.Join(mount, rel)
	for _, tc := range []struct {
		name, path string
		want       bool
	}{
		{"own cgroup", self, true},
		{"own cgroup, unclean path", self + "/", true},
		{"a cgroup above with the same ending", filepath.Join(mount, "elsewhere", rel), false},
		{"a child of its own", filepath.Join(self, "child"), false},
		{"another mount", filepath.Join("/other", rel), false},
	} {
		if got := Holds(mount, tc.path, os.Getpid()); got != tc.want {
			t.Errorf("%s: Holds(%q, %q, self) = %v, want %v", tc.name, mount, tc.path, got, tc.want)
		}
	}
	if Holds("", self, os.Getpid()) {
		t.Error("Holds with no mount = true, want false")
	}
}
