package progcgroup

import (
	"os"
	"path/filepath"
	"testing"
)

func TestIsProgram(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		want bool
	}{
		{"/hbx.0123456789ab/executor", true},
		{"/system.slice/box.service/hbx.0123456789ab/hermes", true},
		{"/", false},
		{"/hbx.0123456789ab", false},
		{"/hbx.0123456789AB/executor", false},
		{"/hbx.0123456789a/executor", false},
		{"/docker/abc/executor", false},
		{"/hbx.0123456789ab/executor/child", false},
	} {
		if got := IsProgram(tc.rel); got != tc.want {
			t.Errorf("IsProgram(%q) = %v, want %v", tc.rel, got, tc.want)
		}
	}
}

// TestMembersOutsideProgramCgroup: a process in no program cgroup (this
// test, at the hierarchy's root or a container's) has no members: the
// callers fall back to the process tree.
func TestMembersOutsideProgramCgroup(t *testing.T) {
	if m, ok := Members("/proc", os.Getpid()); ok {
		t.Errorf("Members(self) = %v, true; want false", m)
	}
	if _, ok := Members("/proc", 1<<22+1); ok {
		t.Errorf("Members(no such pid) = true, want false")
	}
}

func TestMount(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, text, want string }{
		{"v2 beside v1", "30 1 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup/unified"},
		{"none", "30 1 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", ""},
	} {
		p := filepath.Join(dir, tc.name)
		if err := os.WriteFile(p, []byte(tc.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := Mount(p); got != tc.want {
			t.Errorf("Mount(%s) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := Mount(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("Mount(missing) = %q, want \"\"", got)
	}
}
