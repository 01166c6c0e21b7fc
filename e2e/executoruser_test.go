package e2e

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/supervisor"
)

// TestExecutorUserE2E (issue 23): Executor configured to run as root
// starts with one warning line at each start; with executor.user left at
// its default, hbx install creates the unprivileged system user executor
// (when missing), the root-owned data and state an earlier start left are
// handed over to it once, logged, and the payload runs as that user,
// healthy; the next start hands over nothing and warns nothing.
func TestExecutorUserE2E(t *testing.T) {
	requireE2E(t)
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "hbx creates the user executor and switches to it as root: run as root")
	}
	_, err := user.Lookup("executor")
	existed := err == nil
	if !existed {
		t.Cleanup(func() { exec.Command("userdel", "executor").Run() })
	}
	reg, _, ref := pushed(t)
	b := newBox(t, reg, ref, nil, "")
	openWayDown(t, b.dir)
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install (user root) = %d\n%s", r.code, r.stderr)
	}
	socket, dir := supervisorConfig(t, b, "")
	s := startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	stopSupervised(t, s)
	if n := strings.Count(readFile(t, s.log), "Executor runs as root"); n != 1 {
		t.Errorf("supervise as root logged the root warning %d times, want once:\n%s", n, readFile(t, s.log))
	}
	if owners := ownersBelow(t, b.dataDir); owners[0] == 0 {
		t.Fatalf("the payload run as root left no root-owned entry in the data directory: %v", owners)
	}

	writeFile(t, b.config, strings.Replace(readFile(t, b.config), "  user: root\n", "", 1), 0o600)
	r := b.hbx("install")
	if r.code != 0 {
		t.Fatalf("hbx install (default user) = %d\n%s", r.code, r.stderr)
	}
	if created := strings.Contains(r.stderr, "created the unprivileged system user"); created == existed {
		t.Errorf("hbx install logged the user's creation: %v, with the user existing before: %v\n%s", created, existed, r.stderr)
	}
	u, err := user.Lookup("executor")
	if err != nil {
		t.Fatalf("user executor after hbx install: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)

	s = startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	sts := s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	if got := procUID(t, statusOf(sts, "executor").PID); got != uid {
		t.Errorf("the payload runs as uid %d, want executor's %d", got, uid)
	}
	stopSupervised(t, s)
	log := readFile(t, s.log)
	if !strings.Contains(log, "handed over to executor.user") || strings.Contains(log, "Executor runs as root") {
		t.Errorf("supervise with the default user: want the handover logged and no root warning:\n%s", log)
	}
	for _, d := range []string{b.dataDir, b.stateDir} {
		if owners := ownersBelow(t, d); owners[0] > 0 || owners[uint32(uid)] == 0 {
			t.Errorf("owners of the entries below %s after the handover: %v; want all uid %d's", d, owners, uid)
		}
	}

	s = startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	if log := readFile(t, s.log); strings.Contains(log, "handed over") || strings.Contains(log, "Executor runs as root") {
		t.Errorf("the second start with the default user handed over or warned again:\n%s", log)
	}
}

// openWayDown makes each test temporary directory above and at dir 0755,
// so only hbx's own modes stand between executor.user and the box.
func openWayDown(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != filepath.Dir(os.TempDir()) && d != "/"; d = filepath.Dir(d) {
		if strings.HasPrefix(d, os.TempDir()+"/") {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// stopSupervised stops s with SIGTERM and waits for it to exit.
func stopSupervised(t *testing.T, s *supervised) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(slow(t, 60*time.Second)):
		t.Fatal("hbx supervise did not exit after SIGTERM")
	}
}

// ownersBelow counts the entries below dir (not dir itself) by owner uid.
func ownersBelow(t *testing.T, dir string) map[uint32]int {
	t.Helper()
	owners := map[uint32]int{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		owners[info.Sys().(*syscall.Stat_t).Uid]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return owners
}

// procUID is the real uid of pid (/proc/PID/status).
func procUID(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			if fields := strings.Fields(rest); len(fields) > 0 {
				n, _ := strconv.Atoi(fields[0])
				return n
			}
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return -1
}
