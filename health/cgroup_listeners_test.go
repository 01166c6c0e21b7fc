package health

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv/testcgroup"

	"github.com/hermesbox/hbx/internal/progcgroup"
	"github.com/hermesbox/hbx/internal/testenv"
)

// programCgroup makes a program cgroup (as the supervisor names them:
// <mount>/hbx.<12 hex>/name) on the writable cgroup v2 hierarchy and
// returns it open for UseCgroupFD; it is removed at the end of the test.
func programCgroup(t *testing.T, name string) *os.File {
	t.Helper()
	mount := progcgroup.Mount("/proc/self/mountinfo")
	if mount == "" {
		testenv.Missing(t, "no cgroup v2 hierarchy is mounted (this machine kind has one at /sys/fs/cgroup/unified)")
	}
	id := make([]byte, 6)
	if _, err := rand.Read(id); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(mount, progcgroup.Subtree(hex.EncodeToString(id)))
	path := filepath.Join(tree, name)
	if err := os.MkdirAll(path, 0o755); err != nil {
		testenv.Missing(t, "cgroup v2 at "+mount+" is not writable: "+err.Error())
	}
	d, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	// The helpers exit when the test's pipes close (cleanups run in
	// reverse: theirs first); the tree goes once it is empty, or the
	// test fails naming it.
	testcgroup.RemoveCgroup(t, tree)
	t.Cleanup(func() { d.Close() })
	return d
}

// TestListenersCgroupMembers: when the executor runs in a program cgroup
// of hbx's supervisor, the listeners check counts its members: a
// listener that left the process group and the tree (a new session,
// reparented by a double fork, as Python's start_new_session does) and
// binds 0.0.0.0 is found and fails the check. Outside a program cgroup
// the same listener is invisible (the gap the cgroup closes).
func TestListenersCgroupMembers(t *testing.T) {
	cg := programCgroup(t, "executor")
	for _, tc := range []struct {
		name    string
		sys     *syscall.SysProcAttr
		wantErr bool
	}{
		{"in a program cgroup", &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: int(cg.Fd())}, true},
		{"no cgroup", &syscall.SysProcAttr{Setpgid: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid, bound := startTree(t, tc.sys, []string{"HBXTEST_DAEMON_SETSID=1"}, "127.0.0.1:0", "", "0.0.0.0:0")
			_, err := Listeners(pid, bound[0])
			if !tc.wantErr {
				if err != nil {
					t.Errorf("Listeners() = %v, want nil (the escaped listener is not seen without a cgroup)", err)
				}
				return
			}
			if !errors.Is(err, ErrNotLoopback) || !strings.Contains(err.Error(), bound[1].String()+" (pid ") {
				t.Errorf("Listeners() = %v, want ErrNotLoopback naming %s", err, bound[1])
			}
		})
	}
}
