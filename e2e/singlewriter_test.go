package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/procscan"
	"github.com/hermesbox/hbx/internal/testenv/testproc"
	"github.com/hermesbox/hbx/supervisor"
)

// appenderProgram leaves its process group at once (setsid) and appends
// its pid to $DIR/appends every 20ms; its pid goes to $DIR/escapees.
const appenderProgram = `  appender:
    command: [/bin/sh, -c, 'setsid sh -c "echo \$\$ >> $DIR/escapees; while :; do echo \$\$ >> $DIR/appends; sleep 0.02; done" & wait']
    stopwaitsecs: 2
`

// hbxEnv runs hbx with the box's config and extra environment, killing it
// after timeout (a supervisor that should have refused would run on).
func hbxEnv(t *testing.T, b *box, env []string, timeout time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), append([]string{"--config", b.config}, args...)...)
	cmd.Env = append(cleanEnv(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 30 * time.Second
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run hbx: %v", err)
	}
	if ctx.Err() != nil {
		r.code = -1
		r.stderr += "\n(killed after " + timeout.String() + ")"
	}
	return r
}

// lines returns the integers in file, one a line, in order.
func lines(path string) []int {
	f, err := os.Open(path)
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

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	timeout = slow(t, timeout)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// refusal checks that r is exit 1 with its error, one "hbx: " line,
// naming holder.
func refusal(t *testing.T, what string, r result, holder string) {
	t.Helper()
	refusalCode(t, what, r, holder, 1)
}

// refusalCode is refusal with the exit code want (2: the configuration
// names a data directory hbx refuses, such as a mount point).
func refusalCode(t *testing.T, what string, r result, holder string, want int) {
	t.Helper()
	var errs []string
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, "hbx: ") && !strings.HasPrefix(l, "hbx: warning: ") {
			errs = append(errs, l)
		}
	}
	if r.code != want || len(errs) != 1 || !strings.Contains(errs[0], holder) {
		t.Errorf("%s = %d, %q; want exit %d and one error line naming %s", what, r.code, r.stderr, want, holder)
	}
}

// appenderBox is an installed box whose supervisor runs Executor and the
// appender; it returns the supervisor once both are RUNNING.
func appenderBox(t *testing.T) (b *box, s *supervised, dir string) {
	t.Helper()
	b = installedBox(t)
	socket, dir := supervisorConfig(t, b, appenderProgram)
	t.Cleanup(func() { // runs after the supervisors' cleanups
		for _, pid := range lines(filepath.Join(dir, "escapees")) { // still an escapee: its command line names dir
			procscan.Signal(pid, syscall.SIGKILL, func(pid int) bool { return strings.Contains(cmdline(pid), dir) })
		}
	})
	s = startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "appender": supervisor.Running})
	return b, s, dir
}

// One Executor per data directory, whoever starts it: a second supervisor
// on another socket and port, hbx run executor beside a supervisor, and
// supervise, backup or a second run beside hbx run executor refuse, naming
// the holder, before they start anything.
func TestSingleWriterE2E(t *testing.T) {
	requireE2E(t)
	b, s, dir := appenderBox(t)
	holder := fmt.Sprintf("pid %d (hbx supervise) since ", s.cmd.Process.Pid)
	other := filepath.Join(filepath.Dir(s.socket), "other.sock")
	r := hbxEnv(t, b, []string{"HBX_SUPERVISOR_SOCKET=" + other, fmt.Sprintf("HBX_EXECUTOR_PORT=%d", freePort(t))}, 30*time.Second, "supervise")
	refusal(t, "hbx supervise on another socket and port", r, holder)
	// The same data directory through another path (issue 25 item 5):
	// through a symlink the one lock is found; a bind mount of the
	// directory is refused as a mount point.
	link, bind := filepath.Join(b.dir, "data-link"), filepath.Join(b.dir, "data-bind")
	if err := os.Symlink(b.dataDir, link); err != nil {
		t.Fatal(err)
	}
	r = hbxEnv(t, b, []string{"HBX_SUPERVISOR_SOCKET=" + other, fmt.Sprintf("HBX_EXECUTOR_PORT=%d", freePort(t)), "HBX_EXECUTOR_DATA_DIR=" + link}, 30*time.Second, "supervise")
	refusal(t, "hbx supervise on a symlink to the data directory", r, holder)
	if err := os.Mkdir(bind, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "--bind", b.dataDir, bind).CombinedOutput(); err != nil {
		t.Fatalf("mount --bind: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", bind).Run() })
	r = hbxEnv(t, b, []string{"HBX_SUPERVISOR_SOCKET=" + other, fmt.Sprintf("HBX_EXECUTOR_PORT=%d", freePort(t)), "HBX_EXECUTOR_DATA_DIR=" + bind}, 30*time.Second, "supervise")
	refusalCode(t, "hbx supervise on a bind mount of the data directory", r, bind+" is a mount point", 2)
	refusal(t, "hbx run executor beside hbx supervise", hbxEnv(t, b, nil, 30*time.Second, "run", "executor"), holder)
	if n := len(lines(filepath.Join(dir, "escapees"))); n != 1 {
		t.Errorf("%d appenders started, want 1", n)
	}
	if r := b.hbx("shutdown"); r.code != 0 {
		t.Fatalf("hbx shutdown = %d\n%s", r.code, r.stderr)
	}
	<-s.exited

	stop := runExecutor(t, b)
	runHolder := "(hbx run executor) since "
	refusal(t, "hbx supervise beside hbx run executor", hbxEnv(t, b, nil, 30*time.Second, "supervise"), runHolder)
	refusal(t, "hbx backup beside hbx run executor", hbxEnv(t, b, nil, 30*time.Second, "backup", "--no-encrypt"), runHolder)
	refusal(t, "hbx run executor twice", hbxEnv(t, b, nil, 30*time.Second, "run", "executor"), runHolder)
	stop()
	if r := b.hbx("backup", "--no-encrypt"); r.code != 0 {
		t.Errorf("hbx backup with nothing running = %d\n%s", r.code, r.stderr)
	}
}

// A process that left its program's group (setsid) is stopped with the
// program, so a start never runs a second copy beside it.
func TestSetsidEscapeE2E(t *testing.T) {
	requireE2E(t)
	b, _, dir := appenderBox(t)
	escapees := func() []int { return lines(filepath.Join(dir, "escapees")) }
	first := escapees()[0]
	if r := b.hbx("stop", "appender"); r.code != 0 {
		t.Fatalf("hbx stop appender = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !processGone(first) {
		t.Errorf("the setsid process %d survived hbx stop", first)
	}
	if r := b.hbx("start", "appender"); r.code != 0 {
		t.Fatalf("hbx start appender = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	waitFor(t, "the restarted appender", 10*time.Second, func() bool { return len(escapees()) == 2 })
	if !processGone(first) {
		t.Errorf("two copies: the first appender %d lives beside the second", first)
	}
}

// After kill -9 of the supervisor its program's escaped process lives on;
// the next supervisor stops it, and says so, before it starts anything:
// never two writers at once.
func TestKilledSupervisorE2E(t *testing.T) {
	requireE2E(t)
	b, s, dir := appenderBox(t)
	escapees := func() []int { return lines(filepath.Join(dir, "escapees")) }
	appends := filepath.Join(dir, "appends")
	old := escapees()[0]
	s.cmd.Process.Kill()
	<-s.exited
	n := len(lines(appends))
	waitFor(t, "the old appender to go on appending", 10*time.Second, func() bool { return len(lines(appends)) > n+3 })
	if processGone(old) {
		t.Fatal("the appender died with its supervisor; the test shows nothing")
	}
	s2 := startSupervise(t, b, s.socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s2.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "appender": supervisor.Running})
	waitFor(t, "the new appender", 10*time.Second, func() bool { return len(escapees()) == 2 })
	fresh := escapees()[1]
	waitFor(t, "the new appender's first line", 10*time.Second, func() bool { return slices.Contains(lines(appends), fresh) })
	if !processGone(old) {
		t.Errorf("the old appender %d lives beside the new one", old)
	}
	all := lines(appends)
	lastOld, firstNew := -1, slices.Index(all, fresh)
	for i, p := range all {
		if p == old {
			lastOld = i
		}
	}
	if lastOld > firstNew {
		t.Errorf("two writers: the old appender %d appended at line %d, after the new %d started at line %d", old, lastOld, fresh, firstNew)
	}
	log := readFile(t, s2.log)
	// Under qemu-user (the arm64 suite) prctl(PR_SET_CHILD_SUBREAPER)
	// fails: the guarantee must hold without it.
	t.Logf("the supervisors were child subreapers: %v", !strings.Contains(log, "not a child subreaper"))
	if !strings.Contains(log, fmt.Sprintf(`msg="stopped a process left running by a previous supervisor" program=appender pid=%d `, old)) {
		t.Errorf("the new supervisor did not say it stopped %d:\n%s", old, log)
	}
	if i, j := strings.Index(log, "stopped a process left running"), strings.Index(log, "msg=spawned"); i < 0 || j < i {
		t.Errorf("the new supervisor spawned before it stopped the leftovers:\n%s", log)
	}
}

// HUP reopens the log files and the supervisor runs on; QUIT stops every
// program and exits 0 (both used to kill it at once, leaving its programs).
func TestSupervisorSignalsE2E(t *testing.T) {
	requireE2E(t)
	_, s, dir := appenderBox(t)
	fresh := lines(filepath.Join(dir, "escapees"))[0]
	s.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "the HUP to be logged", 10*time.Second, func() bool {
		return s.cmd.ProcessState != nil || strings.Contains(readFile(t, s.log), `msg="signal: reopened log files" signal=SIGHUP`)
	})
	exe := s.waitStates(5*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "appender": supervisor.Running})
	execPID := statusOf(exe, "executor").PID
	s.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case err := <-s.exited:
		if err != nil {
			t.Errorf("hbx supervise after SIGQUIT: %v, want exit 0", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("hbx supervise still runs 60s after SIGQUIT")
	}
	if !processGone(execPID) || !processGone(fresh) {
		t.Errorf("after SIGQUIT: executor %d gone=%v, appender %d gone=%v; want both gone", execPID, processGone(execPID), fresh, processGone(fresh))
	}
}

// A process that holds the data lock while no owner lives (what a killed
// supervisor or hbx run executor leaves) makes a backup refuse, naming it,
// and is stopped by the next hbx supervise before Executor starts.
func TestDataLockLeftoversE2E(t *testing.T) {
	requireE2E(t)
	b := installedBox(t)
	socket, dir := supervisorConfig(t, b, "")
	lockPath := filepath.Join(filepath.Dir(b.dataDir), ".data.lock")
	if err := os.MkdirAll(filepath.Dir(lockPath), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	left := exec.Command("sleep", "1000")
	left.ExtraFiles = []*os.File{f}
	left.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close() // the sleep alone holds the lock now, like a dead owner's payload
	exited := make(chan error, 1)
	go func() { exited <- left.Wait() }()
	t.Cleanup(func() { left.Process.Kill() })
	pid := left.Process.Pid

	r := hbxEnv(t, b, nil, 30*time.Second, "backup", "--no-encrypt")
	refusal(t, "hbx backup beside a leftover", r, fmt.Sprintf("is held by pid %d (sleep) since ", pid))

	s := startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the leftover %d still runs beside the new supervisor's Executor", pid)
	}
	log := readFile(t, s.log)
	i := strings.Index(log, fmt.Sprintf(`msg="stopped a process left running on the data directory by an owner that is gone" pid=%d command=sleep `, pid))
	if j := strings.Index(log, "msg=spawned"); i < 0 || j < i {
		t.Errorf("hbx supervise did not say it stopped %d before it spawned Executor:\n%s", pid, log)
	}
}

// Before its supervisor runs, hbx supervise can spend seconds stopping
// what a dead owner left (here a leftover that ignores SIGTERM, so the
// stop waits the executor's stopwaitsecs): HUP and USR2 meanwhile are
// logged and ignored (they used to end hbx at once), and it goes on to
// serve; a QUIT then stops it with exit 0 like a running supervisor.
func TestSuperviseSignalsBeforeRunE2E(t *testing.T) {
	requireE2E(t)
	b := installedBox(t)
	socket, dir := supervisorConfig(t, b, `  executor:
    stopwaitsecs: 4
`)
	lockPath := filepath.Join(filepath.Dir(b.dataDir), ".data.lock")
	if err := os.MkdirAll(filepath.Dir(lockPath), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	left := exec.Command("sh", "-c", `trap "" TERM; while :; do sleep 0.1; done`)
	left.ExtraFiles = []*os.File{f}
	left.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	testproc.KillAtEnd(t, left.Process.Pid) // by identity: it is reaped below, its pid then free
	go left.Wait()

	s := startSupervise(t, b, socket, dir)
	// The owner lock is taken (and names this supervise) before the
	// leftovers are stopped, which takes stopwaitsecs here.
	owner := fmt.Sprintf(`"pid":%d`, s.cmd.Process.Pid)
	waitFor(t, "hbx supervise to own the data lock", 20*time.Second, func() bool {
		b, _ := os.ReadFile(lockPath + ".owner")
		return s.cmd.ProcessState != nil || strings.Contains(string(b), owner)
	})
	if processGone(left.Process.Pid) {
		t.Fatal("the leftover is gone before the signals were sent: the test proves nothing")
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR2} {
		if err := s.cmd.Process.Signal(sig); err != nil {
			t.Fatalf("signal %v: %v", sig, err)
		}
	}
	healthyAt(t, b.port, 60*time.Second)
	log := readFile(t, s.log)
	for _, want := range []string{`msg="signal: ignored while the supervisor starts" signal=SIGHUP`, `msg="signal: ignored while the supervisor starts" signal=SIGUSR2`} {
		if !strings.Contains(log, want) {
			t.Errorf("hbx supervise log lacks %q:\n%s", want, log)
		}
	}
	s.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case err := <-s.exited:
		if err != nil {
			t.Errorf("hbx supervise after SIGQUIT: %v, want exit 0", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("hbx supervise still runs 60s after SIGQUIT")
	}
}
