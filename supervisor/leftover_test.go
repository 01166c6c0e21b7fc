package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testenv/testproc"
)

// A process that leaves its program's session (setsid) is stopped with
// the program, and Status names it while the stop waits for it.
func TestStopStopsEscapedProcess(t *testing.T) {
	dir := progDir(t, "escaper")
	p := helperProgram(t, dir, "escaper", "setsid-child", "")
	p.StopWait = 500 * time.Millisecond
	s := runSupervisor(t, Options{Programs: []Program{p}, StateDir: t.TempDir()})
	waitState(t, s, "escaper", 30*time.Second, Running)
	ps := pids(t, dir)
	if len(ps) != 2 {
		t.Fatalf("pids = %v, want leader and leaf", ps)
	}
	leaf := ps[1]
	if g := pgidOf(leaf); g == ps[0] || g == 0 {
		t.Fatalf("leaf %d is in group %d: it did not escape", leaf, g)
	}
	seen := make(chan string, 1)
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if st := s.Get("escaper"); strings.Contains(st.Detail, fmt.Sprintf("pid %d (", leaf)) {
				seen <- st.State.String() + ": " + st.Detail
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		seen <- ""
	}()
	res, err := s.Stop(context.Background(), "escaper")
	if err != nil || res[0].Error != "" || res[0].State != Stopped {
		t.Fatalf("Stop() = %+v, %v", res, err)
	}
	if !processGone(leaf) {
		t.Errorf("escaped leaf %d survived the stop", leaf)
	}
	if d := <-seen; d == "" || !strings.HasPrefix(d, "STOPPING") {
		t.Errorf("Status during the stop never named the escaped leaf %d (got %q)", leaf, d)
	}
}

// A process that left its program's session and whose main thread then
// exited while another thread runs is found by the marker (its threads'
// file tables hold it; /proc/PID/fd of its zombie main thread lists
// nothing) and stopped with the program, with no cgroup to find it by.
// It used to be missed: Stop said STOPPED and it ran on.
func TestStopStopsEscapedProcessWhoseMainThreadExited(t *testing.T) {
	dir := progDir(t, "escaper")
	p := helperProgram(t, dir, "escaper", "setsid-mainexit", "")
	p.StopWait = 500 * time.Millisecond
	s := runSupervisor(t, Options{Programs: []Program{p}, StateDir: t.TempDir()})
	waitState(t, s, "escaper", 30*time.Second, Running)
	ps := pids(t, dir)
	if len(ps) != 2 {
		t.Fatalf("pids = %v, want leader and leaf", ps)
	}
	leaf := ps[1]
	testproc.KillAtEnd(t, leaf)
	if !testenv.MainThreadExited(leaf) {
		t.Fatalf("leaf %d: main thread not exited with another thread alive", leaf)
	}
	res, err := s.Stop(context.Background(), "escaper")
	if err != nil || res[0].Error != "" || res[0].State != Stopped {
		t.Fatalf("Stop() = %+v, %v", res, err)
	}
	for deadline := time.Now().Add(time.Minute); !leafGone(leaf); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("escaped leaf %d, its main thread exited, survived the stop", leaf)
		}
	}
}

// leafGone reports whether no thread of pid runs (reaped by init or a
// zombie whole).
func leafGone(pid int) bool {
	return syscall.Kill(pid, 0) == syscall.ESRCH || !testenv.MainThreadExited(pid) && zombie(pid)
}

// A program that exits leaving a process in its own session is not
// started again until that process is gone; with cgroups too (where the
// kill of the leftover must not keep the next start from living).
func TestRestartWaitsForEscapedProcess(t *testing.T) {
	for _, cgroups := range []bool{false, true} {
		t.Run(fmt.Sprintf("cgroups=%v", cgroups), func(t *testing.T) {
			dir := progDir(t, "leaky")
			p := helperProgram(t, dir, "leaky", "leave-setsid", "")
			p.StopWait = 300 * time.Millisecond
			p.Autorestart = AutorestartTrue
			p.StartSecs = 100 * time.Millisecond
			s := runSupervisor(t, Options{Programs: []Program{p}, StateDir: t.TempDir(), Cgroups: cgroups})
			if in := s.Info(); cgroups && in.Cgroups == "" {
				t.Fatalf("Info() = %+v, want cgroups (this host mounts cgroup v2)", in)
			}
			waitState(t, s, "leaky", 30*time.Second, Running)
			deadline := time.Now().Add(30 * time.Second)
			var check []byte
			for len(check) == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				check, _ = os.ReadFile(filepath.Join(dir, "check"))
			}
			if !strings.Contains(string(check), "alive=false") {
				t.Errorf("second instance saw the old escaped grandchild: %q", check)
			}
			waitState(t, s, "leaky", 30*time.Second, Running)
		})
	}
}

// processGone reports whether pid is gone or a zombie.
func processGone(pid int) bool {
	return syscall.Kill(pid, 0) == syscall.ESRCH || zombie(pid)
}

// A second supervisor on the same state directory refuses, whatever its
// socket.
func TestStateDirOneSupervisor(t *testing.T) {
	state := t.TempDir()
	dir := progDir(t, "one")
	s1 := runSupervisor(t, Options{Programs: []Program{helperProgram(t, dir, "one", "sleep", "")}, StateDir: state})
	waitState(t, s1, "one", 30*time.Second, Running)
	// RUNNING comes after startsecs, not after the helper's own start
	// record: wait for the record, so a loaded machine cannot fail this.
	for deadline := time.Now().Add(10 * time.Second); len(starts(t, dir)) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	s2, err := New(Options{Programs: []Program{helperProgram(t, dir, "one", "sleep", "")}, StateDir: state, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = s2.Run(context.Background())
	if !errors.Is(err, ErrAlreadyRunning) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d (hbx supervise)", os.Getpid())) {
		t.Fatalf("second Run() = %v, want ErrAlreadyRunning naming pid %d", err, os.Getpid())
	}
	if got := starts(t, dir); len(got) != 1 {
		t.Errorf("starts = %v, want the first supervisor's one start", got)
	}
}

// supervisorProcess is a real supervisor process (the "supervise" helper).
type supervisorProcess struct {
	cmd  *exec.Cmd
	log  string
	done chan error
}

func startSupervisorProcess(t *testing.T, state, dir, prog, logName string, env ...string) *supervisorProcess {
	t.Helper()
	return startSupervisorProcessAttr(t, nil, state, dir, prog, logName, env...)
}

// startSupervisorProcessAttr is startSupervisorProcess with the
// supervisor process's SysProcAttr (a cgroup to start it in).
func startSupervisorProcessAttr(t *testing.T, sys *syscall.SysProcAttr, state, dir, prog, logName string, env ...string) *supervisorProcess {
	t.Helper()
	logPath := filepath.Join(dir, logName)
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := exec.Command(os.Args[0])
	c.Env = append(append(os.Environ(), "HBXTEST_HELPER=supervise", "HBXTEST_STATE="+state, "HBXTEST_DIR="+dir, "HBXTEST_PROG="+prog), env...)
	c.Stdout, c.Stderr = f, f
	c.SysProcAttr = sys
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	sp := &supervisorProcess{cmd: c, log: logPath, done: make(chan error, 1)}
	go func() { sp.done <- c.Wait() }()
	t.Cleanup(func() {
		if c.ProcessState == nil {
			c.Process.Signal(syscall.SIGTERM)
			select {
			case <-sp.done:
			case <-time.After(10 * time.Second):
				c.Process.Kill()
			}
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s:\n%s", logName, b)
		}
	})
	return sp
}

// waitLog waits until the log matches re and returns the match.
func (sp *supervisorProcess) waitLog(t *testing.T, re string, timeout time.Duration) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(sp.log)
		if m := rx.FindString(string(b)); m != "" {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("log never matched %q:\n%s", re, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// appenders returns the pids in DIR/appends in order of their lines.
func appenders(t *testing.T, dir string) []int {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "appends"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// After kill -9 of the supervisor, its program's grandchild survives; a
// new supervisor stops it (and says so) before it starts the program
// again, so two writers never append at once.
func TestKilledSupervisorLeftoversStopped(t *testing.T) {
	// The grandchild holds the marker; or it closed it and is found
	// through the recorded process group.
	// Without a child subreaper (qemu-user) the same holds: none of it
	// depends on the prctl.
	for _, sub := range []string{"", "1"} {
		for _, arg := range []string{"", "close"} {
			name := "marker=" + map[string]string{"": "kept", "close": "closed"}[arg]
			if sub != "" {
				name += "/no-subreaper"
			}
			t.Run(name, func(t *testing.T) {
				killedSupervisorLeftovers(t, arg, "HBXTEST_NO_SUBREAPER="+sub)
			})
		}
	}
	// In a cgroup: the grandchild closed its marker, and is found as a
	// member of the program's cgroup.
	t.Run("cgroups", func(t *testing.T) { killedSupervisorLeftovers(t, "close", "HBXTEST_CGROUPS=1") })
}

func killedSupervisorLeftovers(t *testing.T, arg, subreaperEnv string) {
	state, dir := t.TempDir(), progDir(t, "prog")
	sup1 := startSupervisorProcess(t, state, dir, "fork-append", "sup1.log", "HBXTEST_ARG="+arg, subreaperEnv)
	var old int
	deadline := time.Now().Add(10 * time.Second)
	for old == 0 {
		if a := appenders(t, dir); len(a) > 0 {
			old = a[0]
		} else if time.Now().After(deadline) {
			t.Fatal("no appends from the first supervisor's program")
		}
		time.Sleep(5 * time.Millisecond)
	}
	testproc.KillAtEnd(t, old)
	sup1.cmd.Process.Kill()
	<-sup1.done
	// The grandchild lives on and keeps appending.
	n := len(appenders(t, dir))
	deadline = time.Now().Add(5 * time.Second)
	for len(appenders(t, dir)) < n+5 {
		if time.Now().After(deadline) || processGone(old) {
			t.Fatalf("the grandchild %d did not survive the supervisor's SIGKILL; the test shows nothing", old)
		}
		time.Sleep(5 * time.Millisecond)
	}

	sup2 := startSupervisorProcess(t, state, dir, "fork-append", "sup2.log", "HBXTEST_ARG="+arg, subreaperEnv)
	var fresh int
	deadline = time.Now().Add(10 * time.Second)
	for fresh == 0 {
		for _, p := range appenders(t, dir) {
			if p != old {
				fresh = p
			}
		}
		if fresh == 0 && time.Now().After(deadline) {
			t.Fatal("the second supervisor's program never appended")
		}
		time.Sleep(5 * time.Millisecond)
	}
	testproc.KillAtEnd(t, fresh)
	if !processGone(old) {
		t.Errorf("the old grandchild %d still lives beside the new program", old)
	}
	a := appenders(t, dir)
	lastOld, firstNew := slices.Index(a, fresh), -1
	for i, p := range a {
		if p == old {
			firstNew = i
		}
	}
	if firstNew > lastOld {
		t.Errorf("appends interleave: the old writer %d appended at line %d after the new writer %d started at line %d", old, firstNew, fresh, lastOld)
	}
	stopped := sup2.waitLog(t, fmt.Sprintf(`.*stopped a process left running by a previous supervisor" program=prog pid=%d .*`, old), 5*time.Second)
	if !strings.Contains(stopped, "sigkill_after_stopwaitsecs=true") {
		t.Errorf("log = %q, want the SIGKILL after stopwaitsecs said (the leaf ignores SIGTERM)", stopped)
	}
	b, _ := os.ReadFile(sup2.log)
	if i, j := strings.Index(string(b), "stopped a process left running"), strings.Index(string(b), "msg=spawned"); j >= 0 && j < i {
		t.Errorf("the second supervisor spawned before it stopped the leftovers:\n%s", b)
	}
	sup2.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-sup2.done; err != nil {
		t.Errorf("second supervisor after SIGTERM: %v, want exit 0", err)
	}
	if !processGone(fresh) {
		t.Errorf("the new grandchild %d outlived the clean stop", fresh)
	}
}

// TestNoSubreaper: where PR_SET_CHILD_SUBREAPER fails (qemu-user), the
// supervisor says so once in its log and Info, runs its programs, and a
// shutdown still stops an orphaned grandchild (through its process group
// and marker, not its parent).
func TestNoSubreaper(t *testing.T) {
	state, dir := t.TempDir(), progDir(t, "prog")
	sp := startSupervisorProcess(t, state, dir, "double-fork", "sup.log", "HBXTEST_NO_SUBREAPER=1")
	sp.waitLog(t, `supervisor is not a child subreaper \(prctl PR_SET_CHILD_SUBREAPER: invalid argument\)`, 10*time.Second)
	var leaf int
	deadline := time.Now().Add(10 * time.Second)
	for leaf == 0 {
		if ps := pids(t, dir); len(ps) > 0 {
			leaf = ps[0]
		} else if time.Now().After(deadline) {
			t.Fatal("the program never started its grandchild")
		}
		time.Sleep(5 * time.Millisecond)
	}
	testproc.KillAtEnd(t, leaf)
	if ppid := parentOf(leaf); ppid == sp.cmd.Process.Pid {
		t.Fatalf("the orphaned grandchild %d was reparented to the supervisor: it is a subreaper, the test shows nothing", leaf)
	}
	b, _ := os.ReadFile(sp.log)
	if n := strings.Count(string(b), "not a child subreaper"); n != 1 {
		t.Errorf("log says %d times that the supervisor is not a subreaper, want once", n)
	}
	sp.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-sp.done; err != nil {
		t.Errorf("supervisor after SIGTERM: %v, want exit 0", err)
	}
	if !processGone(leaf) {
		t.Errorf("the orphaned grandchild %d outlived the supervisor's shutdown", leaf)
	}
}

// parentOf returns pid's parent pid, or 0.
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	var state string
	var ppid int
	fmt.Sscan(s[i+1:], &state, &ppid)
	return ppid
}

// TestInfoOverSocket: GET /v1/info says whether the supervisor is a child
// subreaper; one that could not become one (qemu-user's EINVAL, injected)
// says why, and one that could says nothing.
func TestInfoOverSocket(t *testing.T) {
	for _, fail := range []bool{false, true} {
		// One supervisor at a time in this process: each owns every wait.
		t.Run(fmt.Sprintf("prctl fails %v", fail), func(t *testing.T) { infoOverSocket(t, fail) })
	}
}

func infoOverSocket(t *testing.T, fail bool) {
	if fail {
		orig := setSubreaper
		setSubreaper = func() error { return syscall.EINVAL }
		t.Cleanup(func() { setSubreaper = orig })
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	dir := progDir(t, "p")
	s := runSupervisor(t, Options{Programs: []Program{helperProgram(t, dir, "p", "sleep", "")}, Socket: sock})
	waitState(t, s, "p", 30*time.Second, Running)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	c, err := Dial(ctx, sock)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	in, err := c.Info(ctx)
	cancel()
	if err != nil || in.PID != os.Getpid() {
		t.Fatalf("Info() = %+v, %v; want this process's pid", in, err)
	}
	if got := in.NotSubreaper != ""; got != fail {
		t.Errorf("Info().NotSubreaper = %q with the prctl failing %v", in.NotSubreaper, fail)
	}
	if fail && !strings.Contains(in.NotSubreaper, "invalid argument") {
		t.Errorf("Info().NotSubreaper = %q, want the prctl's error", in.NotSubreaper)
	}
}

// TestGroupRecordRemovedWhenGone: <name>.group exists only while the
// program's process group may live; after a clean stop it is removed, so a
// later supervisor never stops an unrelated group that reused the id.
func TestGroupRecordRemovedWhenGone(t *testing.T) {
	state, dir := t.TempDir(), progDir(t, "g")
	s := runSupervisor(t, Options{Programs: []Program{helperProgram(t, dir, "g", "sleep", "")}, StateDir: state})
	waitState(t, s, "g", 30*time.Second, Running)
	rec := filepath.Join(state, "g.group")
	if _, err := os.Stat(rec); err != nil {
		t.Fatalf("record of the running program's group: %v", err)
	}
	if _, err := s.Stop(context.Background(), "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(rec); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record after a clean stop: %v, want it removed", err)
	}
}
