//go:build linux

package testcgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv"

	"github.com/hermesbox/hbx/internal/progcgroup"
)

// cgroupRunEnv makes the test binary a test run under RunInCgroup
// (strict) whose one test, TestLeavesACgroupWhenAsked, makes an
// hbx.<id> subtree below its own cgroup and, when the variable is
// "leave", does not remove it.
const cgroupRunEnv = "HBXTEST_CGROUP_RUN"

func TestMain(m *testing.M) {
	if os.Getenv(cgroupRunEnv) != "" {
		os.Exit(RunInCgroup(m, true))
	}
	os.Exit(m.Run())
}

// TestLeavesACgroupWhenAsked is the test of the run cgroupRunEnv starts;
// it does nothing in any other run.
func TestLeavesACgroupWhenAsked(t *testing.T) {
	mode := os.Getenv(cgroupRunEnv)
	if mode == "" {
		return
	}
	own, _ := progcgroup.Of("/proc", os.Getpid())
	tree := filepath.Join(progcgroup.Mount("/proc/self/mountinfo"), own, progcgroup.Subtree("0123456789ab"))
	if err := os.MkdirAll(filepath.Join(tree, "executor"), 0o755); err != nil {
		t.Fatal(err)
	}
	if mode == "remove" {
		RemoveCgroup(t, tree)
	}
}

// TestRunInCgroupFailsARunThatLeavesACgroup: a test run under
// RunInCgroup that leaves an hbx.<id> subtree of its own behind fails
// (exit 1) naming it, and its cgroups are removed all the same; one that
// removes what it made (RemoveCgroup) passes. Neither leaves its run
// cgroup, nor touches cgroups it did not make.
func TestRunInCgroupFailsARunThatLeavesACgroup(t *testing.T) {
	mount := progcgroup.Mount("/proc/self/mountinfo")
	own, ok := progcgroup.Of("/proc", os.Getpid())
	if mount == "" || !ok {
		testenv.Missing(t, "no cgroup v2 hierarchy is mounted (this machine kind has one at /sys/fs/cgroup/unified)")
	}
	base := filepath.Join(mount, own)
	probe := filepath.Join(base, "hbxtest-probe-"+filepath.Base(t.TempDir()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		testenv.Missing(t, "the cgroup v2 hierarchy is not writable: "+err.Error())
	}
	os.Remove(probe)
	bystander := filepath.Join(base, progcgroup.Subtree("fedcba987654"))
	if err := os.Mkdir(bystander, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(bystander) })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode   string
		failed bool
	}{
		{mode: "leave", failed: true},
		{mode: "remove"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cmd := exec.Command(self, "-test.run=^TestLeavesACgroupWhenAsked$")
			cmd.Env = append(os.Environ(), cgroupRunEnv+"="+tc.mode)
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tc.failed || tc.failed && !strings.Contains(string(out), "left 1 cgroups of their own behind (removed now): hbx.0123456789ab") {
				t.Errorf("a run that does %q: %v\n%s\nwant failed = %v, naming hbx.0123456789ab", tc.mode, err, out, tc.failed)
			}
			runs, _ := filepath.Glob(filepath.Join(base, runCgroupPrefix+"*", progcgroup.Subtree("0123456789ab")))
			if _, err := os.Stat(filepath.Join(base, runCgroupPrefix+strconv.Itoa(cmd.Process.Pid))); !os.IsNotExist(err) || len(runs) > 0 {
				t.Errorf("the run's cgroup after it: %v, %q; want it gone", err, runs)
			}
			if _, err := os.Stat(bystander); err != nil {
				t.Errorf("a cgroup the run did not make, %s: %v; want it untouched", bystander, err)
			}
		})
	}
}
