package e2e

import (
	"os"
	"sync"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv/testcgroup"
)

// runDirs are the directories that outlive one test (the test images and
// the built binary, shared by every test of the run); TestMain removes
// them when the run ends, so repeated runs do not fill the disk.
var (
	runDirsMu sync.Mutex
	runDirs   []string
)

// runTempDir is os.MkdirTemp("", pattern) for a directory shared by the
// whole run, removed after the last test.
func runTempDir(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err == nil {
		runDirsMu.Lock()
		runDirs = append(runDirs, dir)
		runDirsMu.Unlock()
	}
	return dir, err
}

func TestMain(m *testing.M) {
	// The hbx commands' cgroups (supervisors', rehearsals') are made in
	// the run's cgroup and removed with it; each box removes its own
	// (newBox: testcgroup.RemoveNewCgroups). Not strict: a command killed
	// with -9 on purpose may leave its subtree to the run's removal.
	code := testcgroup.RunInCgroup(m, false)
	runDirsMu.Lock()
	for _, d := range runDirs {
		_ = os.RemoveAll(d)
	}
	runDirsMu.Unlock()
	os.Exit(code)
}
