package supervisor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hermesbox/hbx/internal/progcgroup"
	"github.com/hermesbox/hbx/internal/testenv"
)

// BenchmarkCgroupHolds: the proof that a pid is a member of a program's
// cgroup, made before each signal of a stop (an escaped process, a
// leftover), here for this process in its own cgroup.
func BenchmarkCgroupHolds(b *testing.B) {
	mount := progcgroup.Mount("/proc/self/mountinfo")
	own, ok := progcgroup.Of("/proc", os.Getpid())
	if mount == "" || !ok {
		testenv.Missing(b, "no cgroup v2 hierarchy is mounted (this machine kind has one at /sys/fs/cgroup/unified)")
	}
	g := &progCgroup{path: filepath.Join(mount, own), mount: mount}
	pid := os.Getpid()
	for b.Loop() {
		if !g.holds(pid) {
			b.Fatalf("holds(%d) = false in its own cgroup %s", pid, g.path)
		}
	}
}
