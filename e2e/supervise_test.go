package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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

	"github.com/hermesbox/hbx/supervisor"
)

// supervised is one running `hbx supervise` of a box.
type supervised struct {
	t      *testing.T
	b      *box
	cmd    *exec.Cmd
	exited chan error
	log    string // its stderr
	socket string
	dir    string // records of the helper programs
}

// supervisorConfig is the part of hbx.yaml that the supervise tests add:
// a short socket path, logs in the box, hermes off (there is no hermes
// binary here) and shell programs standing in for it.
func supervisorConfig(t *testing.T, b *box, programs string) (socket, dir string) {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "hbx") // t.TempDir() paths can pass the 107-byte limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	socket = filepath.Join(sockDir, "hbx.sock")
	dir = filepath.Join(b.dir, "records")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	extra := fmt.Sprintf(`supervisor:
  socket: %s
  log_dir: %s
  health_interval: 200ms
  health_wait: %s
programs:
  hermes:
    enabled: false
%s`, socket, filepath.Join(b.dir, "logs"), slow(t, 30*time.Second), strings.ReplaceAll(programs, "$DIR", dir))
	f, err := os.OpenFile(b.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(extra); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return socket, dir
}

// installedBox pushes the test image, makes a box and installs it.
func installedBox(t *testing.T) *box {
	t.Helper()
	reg, _, ref := pushed(t)
	b := newBox(t, reg, ref, nil, "")
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install = %d\n%s", r.code, r.stderr)
	}
	return b
}

// startSupervise starts `[prefix...] hbx supervise` and stops it at the
// end of the test.
func startSupervise(t *testing.T, b *box, socket, dir string, prefix ...string) *supervised {
	t.Helper()
	args := append(append([]string(nil), prefix...), binary(t), "--config", b.config, "supervise")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = cleanEnv()
	logPath := filepath.Join(b.dir, "supervise.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logf.Close()
	s := &supervised{t: t, b: b, cmd: cmd, exited: make(chan error, 1), log: logPath, socket: socket, dir: dir}
	go func() { s.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
			}
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("hbx supervise log:\n%s", b)
		}
	})
	return s
}

// client dials the supervisor, waiting for its socket.
func (s *supervised) client() *supervisor.Client {
	s.t.Helper()
	deadline := time.Now().Add(slow(s.t, 30*time.Second))
	for {
		c, err := supervisor.Dial(context.Background(), s.socket)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no supervisor on %s: %v", s.socket, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitStates waits until each named program is in the given state; the
// timeout is scaled by [slow], as are the other waits of the harness.
func (s *supervised) waitStates(timeout time.Duration, want map[string]supervisor.State) []supervisor.Status {
	s.t.Helper()
	c := s.client()
	timeout = slow(s.t, timeout)
	deadline := time.Now().Add(timeout)
	for {
		sts, err := c.Status(context.Background())
		ok := err == nil
		for _, st := range sts {
			if w, has := want[st.Name]; has && st.State != w {
				ok = false
			}
		}
		if ok {
			return sts
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("states %+v, %v; want %v", sts, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func statusOf(sts []supervisor.Status, name string) supervisor.Status {
	i := slices.IndexFunc(sts, func(s supervisor.Status) bool { return s.Name == name })
	if i < 0 {
		return supervisor.Status{}
	}
	return sts[i]
}

// healthyAt polls /api/health every millisecond and returns when it first
// answered 200.
func healthyAt(t *testing.T, port int, timeout time.Duration) time.Time {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/api/health", port)
	c := &http.Client{Timeout: 200 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	timeout = slow(t, timeout)
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				logTiming(t, "waited for /api/health 200", time.Since(start))
				return time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/api/health not 200 within %s: %v", timeout, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// processGone reports whether pid has exited (gone, or a zombie).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && len(b) > i+2 && b[i+2] == 'Z'
}

// groupMembers lists the pids in process group pgid.
func groupMembers(pgid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid && !processGone(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// procInfo is a process's parent and state from /proc/PID/stat.
func procInfo(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+2:])
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0][0], true
}

// descendants returns pid's descendants with their parent and state.
func descendants(pid int) map[int][2]int {
	parent := map[int]int{}
	state := map[int]byte{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, st, ok := procInfo(p); ok {
			parent[p], state[p] = pp, st
		}
	}
	out := map[int][2]int{}
	for p := range parent {
		for a := parent[p]; a != 0; a = parent[a] {
			if a == pid {
				out[p] = [2]int{parent[p], int(state[p])}
				break
			}
			if _, ok := parent[a]; !ok {
				break
			}
		}
	}
	return out
}

const gatewayProgram = `  gateway:
    command: [/bin/sh, -c, 'date +%s%N >> $DIR/gateway.starts; exec sleep 1000']
    depends_on: [executor]
`

func TestSupervise(t *testing.T) {
	requireE2E(t)
	b := installedBox(t)
	socket, dir := supervisorConfig(t, b, gatewayProgram+`  stubborn:
    command: [/bin/sh, -c, 'trap "" TERM; sleep 1000 & sleep 1000 & wait']
    stopwaitsecs: 1
    priority: 300
  ghost:
    command: /nonexistent/hermes gateway run --replace
`)
	s := startSupervise(t, b, socket, dir)
	healthy := healthyAt(t, b.port, 60*time.Second)
	sts := s.waitStates(30*time.Second, map[string]supervisor.State{
		"executor": supervisor.Running, "gateway": supervisor.Running, "stubborn": supervisor.Running, "ghost": supervisor.Fatal,
	})

	// The health gate: the gateway started after Executor was healthy.
	rec, err := os.ReadFile(filepath.Join(dir, "gateway.starts"))
	if err != nil {
		t.Fatal(err)
	}
	ns, _ := strconv.ParseInt(strings.TrimSpace(string(rec)), 10, 64)
	if started := time.Unix(0, ns); started.Before(healthy) {
		t.Errorf("gateway started at %s, before Executor's first healthy answer at %s", started, healthy)
	}
	if d := statusOf(sts, "ghost").Detail; !strings.Contains(d, "/nonexistent/hermes: no such file or directory") {
		t.Errorf("ghost detail = %q, want the missing command", d)
	}

	// Socket: mode 0600; a second supervisor refuses to start.
	if st, err := os.Stat(socket); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, %v; want 0600", st.Mode(), err)
	}
	if r := b.hbx("supervise"); r.code != 1 || !strings.Contains(r.stderr, "another supervisor is running") || !strings.Contains(r.stderr, "pid ") {
		t.Errorf("second hbx supervise = %d, %q; want 1 naming the running one", r.code, r.stderr)
	}

	// The control commands.
	r := b.hbx("status")
	// ghost is FATAL: exit 3, naming it.
	if r.code != 3 || !strings.Contains(r.stderr, "not running: ghost (FATAL)") ||
		!regexpMatch(`(?m)^executor\s+RUNNING\s+pid \d+, uptime 0:00:\d\d$`, r.stdout) || !regexpMatch(`(?m)^ghost\s+FATAL\s+`, r.stdout) {
		t.Errorf("hbx status = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := b.hbx("status", "--json", "gateway"); r.code != 0 || !strings.Contains(r.stdout, `"state": "RUNNING"`) {
		t.Errorf("hbx status --json gateway = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := b.hbx("start", "nope"); r.code != 2 || !strings.Contains(r.stderr, `no such program: "nope"`) {
		t.Errorf("hbx start nope = %d, %q; want 2, no such program", r.code, r.stderr)
	}
	if r := b.hbx("start"); r.code != 2 {
		t.Errorf("hbx start without a name = %d, want 2", r.code)
	}
	if r := b.hbx("start", "ghost"); r.code != 1 || !strings.Contains(r.stdout, "ghost: ERROR (FATAL") ||
		!strings.Contains(r.stderr, "start: some programs failed: 1 of 1 not started (see above)") {
		t.Errorf("hbx start ghost = %d, %q, %q; want 1 with the FATAL reason, and how many were not started", r.code, r.stdout, r.stderr)
	}
	if r := b.hbx("logs", "executor", "-n", "1"); r.code != 0 || !strings.Contains(r.stdout, "listening on http://127.0.0.1:") {
		t.Errorf("hbx logs executor = %d, %q", r.code, r.stdout+r.stderr)
	}

	// A crash of Executor: restarted at once, healthy again.
	pid := statusOf(sts, "executor").PID
	killed := time.Now()
	syscall.Kill(pid, syscall.SIGKILL)
	back := healthyAt(t, b.port, 30*time.Second)
	t.Logf("kill -9 of executor to healthy again: %s", back.Sub(killed).Round(time.Millisecond))
	// Natively a bound (target 2 s; make bench measures it); under
	// emulation only healthyAt's limit: Bun's start under qemu-user on a
	// busy machine alone takes tens of seconds.
	if limit := 5 * time.Second; !emulated(t) && back.Sub(killed) > limit {
		t.Errorf("healthy again %s after kill -9, want within %s (target 2s)", back.Sub(killed), limit)
	}
	sts = s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	if statusOf(sts, "executor").PID == pid {
		t.Errorf("executor pid is still %d", pid)
	}

	// A program that ignores SIGTERM, with its children: all gone after
	// stopwaitsecs.
	stubborn := statusOf(sts, "stubborn").PID
	members := groupMembers(stubborn)
	if len(members) != 3 {
		t.Errorf("stubborn's group = %v, want the shell and two sleeps", members)
	}
	r = b.hbx("stop", "stubborn")
	if r.code != 0 || r.stdout != "stubborn: stopped\n" || r.took < time.Second {
		t.Errorf("hbx stop stubborn = %d %q in %s; want stopped after stopwaitsecs (1s)", r.code, r.stdout, r.took)
	}
	for _, p := range members {
		if !processGone(p) {
			t.Errorf("process %d of stubborn survived the stop", p)
		}
	}

	// A hold stops the programs until its connection ends.
	c := s.client()
	h, err := c.Hold(context.Background(), "executor", "gateway")
	if err != nil {
		t.Fatalf("Hold() = %v", err)
	}
	if _, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/health", b.port)); err == nil {
		t.Error("Executor answers while held")
	}
	if r := b.hbx("start", "executor"); r.code != 1 || !strings.Contains(r.stdout, "held") {
		t.Errorf("hbx start executor while held = %d, %q", r.code, r.stdout)
	}
	h.Release()
	healthyAt(t, b.port, 30*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "gateway": supervisor.Running, "stubborn": supervisor.Stopped})

	// SIGTERM: an orderly stop of everything, exit 0, nothing left.
	sts = s.waitStates(time.Second, nil)
	var pids []int
	for _, st := range sts {
		if st.PID != 0 {
			pids = append(pids, st.PID)
		}
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil {
			t.Errorf("hbx supervise after SIGTERM = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("hbx supervise did not exit after SIGTERM")
	}
	for _, p := range pids {
		if !processGone(p) {
			t.Errorf("process %d survived the supervisor", p)
		}
	}
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if r := b.hbx("status"); r.code != 1 || !strings.Contains(r.stderr, "no supervisor is running") {
		t.Errorf("hbx status without a supervisor = %d, %q", r.code, r.stderr)
	}
}

func TestSupervisePID1(t *testing.T) {
	requireE2E(t)
	if out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		// Not a missing prerequisite: a container may forbid new PID namespaces.
		t.Skipf("unshare --pid --fork does not work here: %v %s", err, out)
	}
	b := installedBox(t)
	// Orphans: a double-forked sleeper, and grandchildren that exit while
	// orphaned (reparented to PID 1, which must reap them).
	socket, dir := supervisorConfig(t, b, gatewayProgram+`  forker:
    command: [/bin/sh, -c, '(sleep 1000 &); (sh -c "sleep 0.2" &); (sh -c "sleep 0.3" &); exec sleep 1000']
  flapper:
    command: [/bin/sh, -c, '(sh -c "sleep 0.1" &); sleep 0.5; exit 3']
    autorestart: true
    startsecs: 0
`)
	s := startSupervise(t, b, socket, dir, "unshare", "--pid", "--fork", "--mount-proc")
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "gateway": supervisor.Running, "forker": supervisor.Running})
	time.Sleep(2 * time.Second) // orphans exit, flapper exits and restarts

	// hbx is the only child of unshare, PID 1 in the namespace.
	var hbx int
	for p, pi := range descendants(s.cmd.Process.Pid) {
		if pi[0] == s.cmd.Process.Pid {
			hbx = p
		}
	}
	if hbx == 0 {
		t.Fatal("no hbx under unshare")
	}
	// Each round the flapper leaves an orphan that lives 0.1s (longer on
	// a busy machine), so one look may catch it alive or not yet reaped:
	// look until the double-forked sleeper (sleep 1000) is the one orphan
	// and no zombie is left, for up to a minute. A supervisor that does
	// not reap, or never gets the sleeper, fails at every look.
	var tree map[int][2]int
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		tree = descendants(hbx)
		orphans, zombies := pid1Orphans(tree, hbx)
		if len(orphans) == 1 && len(zombies) == 0 && cmdline(orphans[0]) == "sleep 1000 " {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("for a minute the PID-1 supervisor had orphans %v (want 1, the double-forked sleep 1000) or zombies %v (want none) at every look; last tree %v", orphans, zombies, tree)
			break
		}
	}
	s.cmd.Process.Signal(syscall.SIGTERM) // to unshare: it does not forward signals
	syscall.Kill(hbx, syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil {
			t.Errorf("unshare hbx supervise after SIGTERM = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the PID-1 supervisor did not exit")
	}
	for p := range tree {
		if !processGone(p) {
			t.Errorf("process %d survived the PID-1 supervisor", p)
		}
	}
	// SIGTERM reached Executor through its PID-1 parent (as `docker stop`
	// sends it), and it exited cleanly: no SIGKILL was needed.
	if out := readFile(t, filepath.Join(b.dir, "logs", "executor.out.log")); !strings.Contains(out, "executor: SIGTERM, stopping") {
		t.Errorf("executor's log does not show the SIGTERM it got:\n%s", out)
	}
	if log := readFile(t, s.log); !regexp.MustCompile(`msg=exited program=executor pid=\d+ status="exit status 0"`).MatchString(log) || strings.Contains(log, "SIGKILL") {
		t.Errorf("the supervisor's log does not show a clean exit of executor without SIGKILL:\n%s", log)
	}
}

// pid1Orphans returns the processes of tree (descendants' map) that hbx
// adopted, children of hbx not leading their process group, and its
// zombies.
func pid1Orphans(tree map[int][2]int, hbx int) (orphans, zombies []int) {
	for p, pi := range tree {
		if pi[1] == 'Z' {
			zombies = append(zombies, p)
		}
		if g, err := syscall.Getpgid(p); err == nil && pi[0] == hbx && g != p {
			orphans = append(orphans, p)
		}
	}
	return orphans, zombies
}

func TestSuperviseRefusesBadConfig(t *testing.T) {
	requireE2E(t)
	reg, _, ref := pushed(t)
	b := newBox(t, reg, ref, nil, "")
	socket, _ := supervisorConfig(t, b, `  a:
    command: /bin/true
    depends_on: [b]
    stopsignal: BOGUS
  b:
    command: /bin/true
    depends_on: [a]
    startsecs: -1
    colour: blue
`)
	r := b.hbx("supervise")
	for _, w := range []string{"invalid config, 4 problems:", "programs.b.colour: unknown key", `programs.a.stopsignal: "BOGUS" is not a signal name`,
		"programs.b.startsecs: -1 is negative", "programs.a.depends_on: is a dependency cycle: a -> b -> a"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("hbx supervise stderr does not contain %q:\n%s", w, r.stderr)
		}
	}
	if r.code != 2 {
		t.Errorf("hbx supervise with a bad config = %d, want 2", r.code)
	}
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused supervisor created its socket: %v", err)
	}
}
