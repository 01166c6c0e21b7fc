package supervisor

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv/testcgroup"
	"github.com/hermesbox/hbx/internal/testenv/testproc"

	"github.com/hermesbox/hbx/internal/progcgroup"
	"github.com/hermesbox/hbx/internal/testenv"
)

// testCgroup makes a cgroup of the test's own on the writable cgroup v2
// hierarchy (not named as hbx names its subtrees) and returns its path
// below the mount ("/hbxtest-..."), its directory open for UseCgroupFD,
// and the mount. It is removed, with what hbx left empty in it, at the end.
func testCgroup(t *testing.T) (rel string, dir *os.File, mount string) {
	t.Helper()
	mount = progcgroup.Mount("/proc/self/mountinfo")
	if mount == "" {
		testenv.Missing(t, "no cgroup v2 hierarchy is mounted (this machine kind has one at /sys/fs/cgroup/unified)")
	}
	id := make([]byte, 4)
	if _, err := rand.Read(id); err != nil {
		t.Fatal(err)
	}
	rel = "/hbxtest-" + hex.EncodeToString(id)
	path := mount + rel
	if err := os.Mkdir(path, 0o755); err != nil {
		testenv.Missing(t, "cgroup v2 at "+mount+" is not writable: "+err.Error())
	}
	d, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	// Removed with what hbx made in it once empty, or the test fails.
	testcgroup.RemoveCgroup(t, path)
	t.Cleanup(func() { d.Close() })
	return rel, d, mount
}

// cgroupOf is pid's cgroup v2 path ("0::" in /proc/PID/cgroup).
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	rel, ok := progcgroup.Of("/proc", pid)
	if !ok {
		t.Fatalf("pid %d has no cgroup v2 path", pid)
	}
	return rel
}

// TestProgramCgroupsUnderOwnCgroup: the programs' cgroups live under the
// supervisor's own cgroup (never at the hierarchy's root beside another
// manager's tree), and a supervisor killed with SIGKILL in one cgroup is
// followed by one started in another cgroup that still finds and stops
// what the first left in its program cgroup (the subtree is recorded in
// the state directory), then runs its program under its own cgroup.
func TestProgramCgroupsUnderOwnCgroup(t *testing.T) {
	rel1, cg1, mount := testCgroup(t)
	rel2, cg2, _ := testCgroup(t)
	state, dir := t.TempDir(), progDir(t, "prog")
	sys := func(d *os.File) *syscall.SysProcAttr {
		return &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(d.Fd())}
	}
	sup1 := startSupervisorProcessAttr(t, sys(cg1), state, dir, "fork-append", "sup1.log", "HBXTEST_ARG=close", "HBXTEST_CGROUPS=1")
	old := waitAppender(t, dir, 0)
	testproc.KillAtEnd(t, old)
	if got := cgroupOf(t, old); !strings.HasPrefix(got, rel1+"/hbx.") || !strings.HasSuffix(got, "/prog") {
		t.Fatalf("program cgroup = %s, want %s/hbx.<id>/prog (under the supervisor's own cgroup)", got, rel1)
	}
	sup1.cmd.Process.Kill()
	<-sup1.done

	sup2 := startSupervisorProcessAttr(t, sys(cg2), state, dir, "fork-append", "sup2.log", "HBXTEST_ARG=close", "HBXTEST_CGROUPS=1")
	fresh := waitAppender(t, dir, old)
	testproc.KillAtEnd(t, fresh)
	sup2.waitLog(t, fmt.Sprintf(`.*stopped a process left running by a previous supervisor" program=prog pid=%d .*found_by=cgroup.*`, old), 30*time.Second)
	if !processGone(old) {
		t.Errorf("the first supervisor's leftover %d still lives", old)
	}
	if got := cgroupOf(t, fresh); !strings.HasPrefix(got, rel2+"/hbx.") {
		t.Errorf("second program cgroup = %s, want it under %s", got, rel2)
	}
	if trees, _ := filepath.Glob(mount + rel1 + "/hbx.*"); len(trees) != 0 {
		t.Errorf("the first supervisor's emptied subtree %v is left behind", trees)
	}
	sup2.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-sup2.done; err != nil {
		t.Errorf("second supervisor after SIGTERM: %v, want exit 0", err)
	}
}

// waitAppender waits (generously) for an "append-leaf" other than not to
// append in dir and returns its pid.
func waitAppender(t *testing.T, dir string, not int) int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, p := range appenders(t, dir) {
			if p != not {
				return p
			}
		}
	}
	t.Fatal("no program appended")
	return 0
}
