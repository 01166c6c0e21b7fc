package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testLogger logs to the test's output.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// helperProgram is a program running the test binary as helper h.
func helperProgram(t *testing.T, dir, name, h, arg string) Program {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Program{
		Name:         name,
		Command:      []string{exe, "-test.run=^$"},
		Environment:  []string{"HBXTEST_HELPER=" + h, "HBXTEST_DIR=" + dir, "HBXTEST_ARG=" + arg},
		Autostart:    true,
		Autorestart:  AutorestartUnexpected,
		StartSecs:    50 * time.Millisecond,
		StartRetries: 3,
		StopWait:     2 * time.Second,
		Stdout:       LogFile{Path: filepath.Join(dir, name+".out.log")},
		Stderr:       LogFile{Path: filepath.Join(dir, name+".err.log")},
	}
}

// progDir is a fresh directory for one program's records.
func progDir(t *testing.T, name string) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// runSupervisor starts a supervisor with fast timings and stops it at the
// end of the test, checking that Run returns and leaves no children.
// Each bind is set to the supervisor before Run starts (for hooks).
func runSupervisor(t *testing.T, opts Options, bind ...**Supervisor) *Supervisor {
	t.Helper()
	s := startSupervisor(t, opts, bind...)
	<-s.ready
	return s
}

// startSupervisor is runSupervisor without waiting for the supervisor to
// be ready (its install on start may still run). opts.Logger, when set,
// is kept (a test that reads the log).
func startSupervisor(t *testing.T, opts Options, bind ...**Supervisor) *Supervisor {
	t.Helper()
	if opts.Env == nil {
		opts.Env = os.Environ()
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	if opts.BackoffBase == 0 {
		opts.BackoffBase = 20 * time.Millisecond
	}
	opts.StartPoll = 10 * time.Millisecond
	opts.ProbeTimeout = 500 * time.Millisecond
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	for _, b := range bind {
		*b = s
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run() = %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Run() did not return after cancel")
		}
		if kids := childrenOf(os.Getpid()); len(kids) > 0 {
			t.Errorf("children left after Run returned: %v", kids)
		}
	})
	return s
}

func waitState(t *testing.T, s *Supervisor, name string, timeout time.Duration, states ...State) Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := s.WaitState(ctx, name, states...)
	if err != nil {
		t.Fatalf("%v (detail %q)", err, st.Detail)
	}
	return st
}

// starts returns the start times the helper recorded.
func starts(t *testing.T, dir string) []time.Time {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "starts"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []time.Time
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			out = append(out, time.Unix(0, n))
		}
	}
	return out
}

// pids returns the integers recorded in dir/pids.
func pids(t *testing.T, dir string) []int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(dir, "pids"))
		var out []int
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			out = append(out, n)
		}
		if len(out) > 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// gone reports whether pid no longer exists (not even as a zombie).
func gone(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return errors.Is(err, os.ErrNotExist)
}

func waitGone(t *testing.T, pid int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still exists (zombie: %v)", pid, zombie(pid))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// flakyProbe fails until healthy is set.
type flakyProbe struct{ healthy atomic.Bool }

func (p *flakyProbe) Check(context.Context) error {
	if p.healthy.Load() {
		return nil
	}
	return errors.New("unhealthy")
}

func TestStartOrderAndHealthGate(t *testing.T) {
	dirA, dirB, dirC := progDir(t, "a"), progDir(t, "b"), progDir(t, "c")
	probe := &flakyProbe{}
	a := helperProgram(t, dirA, "a", "sleep", "")
	a.Priority, a.Probe, a.HealthWait = 1, probe, 10*time.Second
	b := helperProgram(t, dirB, "b", "sleep", "")
	b.Priority, b.DependsOn = 2, []string{"a"}
	c := helperProgram(t, dirC, "c", "sleep", "")
	c.Priority = 3
	s := runSupervisor(t, Options{Programs: []Program{c, b, a}})

	// c starts (its priority comes after a's) while a is not healthy; b
	// waits for a.
	waitState(t, s, "c", 30*time.Second, Running)
	if st := s.Get("a"); st.State != Starting {
		t.Errorf("a = %s before its probe succeeded, want STARTING", st.State)
	}
	// Its detail says why it is not RUNNING yet: the probe's last error.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st := s.Get("a")
		if strings.HasSuffix(st.Detail, ", not ready: unhealthy") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a = %s %q while its probe fails, want detail %q", st.State, st.Detail, "not ready: unhealthy")
		}
	}
	if st := s.Get("b"); st.State != Starting || st.PID != 0 || !strings.Contains(st.Detail, "waiting for a") {
		t.Errorf("b = %s pid %d %q, want STARTING without a process, waiting for a", st.State, st.PID, st.Detail)
	}
	time.Sleep(100 * time.Millisecond)
	healthyAt := time.Now()
	probe.healthy.Store(true)
	waitState(t, s, "b", 30*time.Second, Running)
	// RUNNING comes after startsecs, which a loaded machine may reach
	// before the helper processes wrote their start records: wait for them.
	for _, d := range []string{dirA, dirB, dirC} {
		for deadline := time.Now().Add(30 * time.Second); len(starts(t, d)) == 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	sa, sb, sc := starts(t, dirA), starts(t, dirB), starts(t, dirC)
	if len(sa) != 1 || len(sb) != 1 || len(sc) != 1 {
		t.Fatalf("starts a, b, c = %d, %d, %d, want 1 each", len(sa), len(sb), len(sc))
	}
	if a, c := s.Get("a").Started, s.Get("c").Started; !a.Before(c) {
		t.Errorf("a spawned at %s, after c at %s; want priority order", a, c)
	}
	if sb[0].Before(healthyAt) {
		t.Errorf("b started at %s, before a was healthy at %s", sb[0], healthyAt)
	}
	got := []string{}
	for _, st := range s.Status() {
		got = append(got, st.Name+" "+st.State.String())
	}
	if diff := cmp.Diff(got, []string{"a RUNNING", "b RUNNING", "c RUNNING"}); diff != "" {
		t.Errorf("Status() (-got +want):\n%s", diff)
	}
}

func TestCrashRestartBackoffFatal(t *testing.T) {
	dir := progDir(t, "crashy")
	p := helperProgram(t, dir, "crashy", "crash-once", "")
	// The first run lives until told; the later ones exit at once, which
	// a loaded machine may stretch to hundreds of milliseconds: startsecs
	// is far above that, so they cannot count as RUNNING.
	p.StartSecs = 3 * time.Second
	p.StartRetries = 2
	s := runSupervisor(t, Options{Programs: []Program{p}, BackoffBase: 50 * time.Millisecond})

	waitState(t, s, "crashy", 30*time.Second, Running)
	var sawBackoff atomic.Bool
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := s.WaitState(ctx, "crashy", Backoff); err == nil {
			sawBackoff.Store(true)
		}
	}()
	crashed := time.Now()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, s, "crashy", 30*time.Second, Fatal)
	ts := starts(t, dir)
	// One run that reached RUNNING, then StartRetries+1 failed starts.
	if len(ts) != 4 {
		t.Fatalf("crashy started %d times, want 4", len(ts))
	}
	// The restart came soon after the crash: no startsecs, no backoff
	// wait, only a loaded machine's delays.
	if d := ts[1].Sub(crashed); d > 2*time.Second {
		t.Errorf("restart came %s after the crash, want within 2s", d)
	}
	// Then the delays grow: 50ms, 100ms (each plus the run time, which a
	// loaded machine can stretch past 50ms: gaps are not compared).
	g1, g2 := ts[2].Sub(ts[1]), ts[3].Sub(ts[2])
	if g1 < 50*time.Millisecond || g2 < 100*time.Millisecond {
		t.Errorf("retry gaps %s, %s; want growing backoff from 50ms", g1, g2)
	}
	if !sawBackoff.Load() {
		t.Error("never saw BACKOFF")
	}
	if !strings.Contains(st.Detail, "exited too quickly (exit status 1)") || !strings.Contains(st.Detail, "3 attempts") {
		t.Errorf("FATAL detail = %q", st.Detail)
	}
	// A FATAL program starts again on request.
	res, err := s.Start(context.Background(), "crashy")
	if err != nil || len(res) != 1 || res[0].State != Fatal || !strings.Contains(res[0].Error, "start failed") {
		t.Errorf("Start(crashy) = %+v, %v; want a failed start", res, err)
	}
}

func TestAutorestart(t *testing.T) {
	tests := []struct {
		name        string
		autorestart Autorestart
		exitcodes   []int
		code        int
		wantRestart bool
	}{
		{"unexpected, expected code", AutorestartUnexpected, []int{0, 3}, 3, false},
		{"unexpected, unexpected code", AutorestartUnexpected, []int{0, 3}, 4, true},
		{"unexpected, default exitcodes", AutorestartUnexpected, nil, 0, false},
		{"false", AutorestartFalse, nil, 4, false},
		{"true, expected code", AutorestartTrue, nil, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := progDir(t, "p")
			p := helperProgram(t, dir, "p", "wait-exit", strconv.Itoa(tt.code))
			p.Autorestart, p.ExitCodes = tt.autorestart, tt.exitcodes
			s := runSupervisor(t, Options{Programs: []Program{p}})
			waitState(t, s, "p", 30*time.Second, Running)
			// Exit only now, from RUNNING (not a failed start).
			if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if tt.wantRestart {
				deadline := time.Now().Add(30 * time.Second)
				for len(starts(t, dir)) < 2 {
					if time.Now().After(deadline) {
						t.Fatal("not restarted")
					}
					time.Sleep(10 * time.Millisecond)
				}
				return
			}
			st := waitState(t, s, "p", 30*time.Second, Exited)
			time.Sleep(500 * time.Millisecond) // time for a wrong restart to show
			if n := len(starts(t, dir)); n != 1 || s.Get("p").State != Exited {
				t.Errorf("started %d times, state %s; want 1, EXITED", n, s.Get("p").State)
			}
			if want := fmt.Sprintf("exit status %d", tt.code); !strings.Contains(st.Detail, want) {
				t.Errorf("EXITED detail = %q, want %q", st.Detail, want)
			}
		})
	}
}

func TestStopKillsIgnoringGroup(t *testing.T) {
	dir := progDir(t, "stubborn")
	p := helperProgram(t, dir, "stubborn", "ignore-term", "")
	p.StopWait = 300 * time.Millisecond
	s := runSupervisor(t, Options{Programs: []Program{p}})
	waitState(t, s, "stubborn", 30*time.Second, Running)
	ps := pids(t, dir)
	if len(ps) != 2 {
		t.Fatalf("pids = %v, want leader and grandchild", ps)
	}
	// The helper records the pids once the grandchild ignores SIGTERM.
	start := time.Now()
	res, err := s.Stop(context.Background(), "stubborn")
	took := time.Since(start)
	if err != nil || res[0].State != Stopped || res[0].Error != "" {
		t.Fatalf("Stop() = %+v, %v", res, err)
	}
	if took < 300*time.Millisecond || took > 2*time.Second {
		t.Errorf("Stop() took %s, want stopwaitsecs (300ms) and a little", took)
	}
	for _, pid := range ps {
		waitGone(t, pid, 10*time.Second)
	}
}

func TestRestartWaitsForOldGroup(t *testing.T) {
	dir := progDir(t, "leaky")
	p := helperProgram(t, dir, "leaky", "leave-child", "")
	p.StartSecs = 100 * time.Millisecond
	p.StopWait = 300 * time.Millisecond
	p.Autorestart = AutorestartTrue
	s := runSupervisor(t, Options{Programs: []Program{p}})
	waitState(t, s, "leaky", 30*time.Second, Running)
	// It crashes after 200ms, leaving a grandchild that ignores SIGTERM;
	// the restart waits until the grandchild is killed.
	deadline := time.Now().Add(5 * time.Second)
	var check []byte
	for len(check) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		check, _ = os.ReadFile(filepath.Join(dir, "check"))
	}
	if !strings.Contains(string(check), "alive=false") {
		t.Errorf("second instance saw the old grandchild: %q", check)
	}
	ts := starts(t, dir)
	if len(ts) < 2 || ts[1].Sub(ts[0]) < 400*time.Millisecond {
		t.Errorf("starts %v: want the restart after the crash (200ms) and the leftover grace (200ms, LeftoverGrace)", ts)
	}
}

func TestDoubleForkReaped(t *testing.T) {
	dir := progDir(t, "forker")
	p := helperProgram(t, dir, "forker", "double-fork", "")
	s := runSupervisor(t, Options{Programs: []Program{p}})
	waitState(t, s, "forker", 30*time.Second, Running)
	ps := pids(t, dir)
	if len(ps) != 1 {
		t.Fatalf("pids = %v", ps)
	}
	// The orphaned grandchild is reparented to us, the subreaper.
	deadline := time.Now().Add(2 * time.Second)
	for {
		kids := childrenOf(os.Getpid())
		if len(kids) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("children = %v, want the leader and the reparented grandchild %d", kids, ps[0])
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := s.Stop(context.Background(), "forker"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ps[0], 10*time.Second)
	if kids := childrenOf(os.Getpid()); len(kids) != 0 {
		t.Errorf("children after stop = %v", kids)
	}
}

func TestMissingCommandIsFatal(t *testing.T) {
	dir := progDir(t, "ok")
	ok := helperProgram(t, dir, "ok", "sleep", "")
	bad := helperProgram(t, dir, "bad", "sleep", "")
	bad.Command = []string{"/nonexistent/hermes", "gateway"}
	nopath := helperProgram(t, dir, "nopath", "sleep", "")
	nopath.Command = []string{"no-such-command-hbx"}
	s := runSupervisor(t, Options{Programs: []Program{ok, bad, nopath}})
	st := waitState(t, s, "bad", 30*time.Second, Fatal)
	if !strings.Contains(st.Detail, "/nonexistent/hermes: no such file or directory") {
		t.Errorf("bad detail = %q", st.Detail)
	}
	st = waitState(t, s, "nopath", 30*time.Second, Fatal)
	if !strings.Contains(st.Detail, `command "no-such-command-hbx" not found on PATH`) {
		t.Errorf("nopath detail = %q", st.Detail)
	}
	waitState(t, s, "ok", 30*time.Second, Running)
}

// briefErr is a Build error with a short form.
type briefErr struct{}

func (briefErr) Error() string {
	return "a long explanation of why it cannot start, and what to run about it"
}
func (briefErr) Brief() string { return "awaits runtime X" }

// TestBuildErrorBriefIsFatalDetail: a Build error that is a Briefer shows
// its Brief() as the FATAL detail; the start's error keeps the whole.
func TestBuildErrorBriefIsFatalDetail(t *testing.T) {
	dir := progDir(t, "app")
	p := helperProgram(t, dir, "app", "sleep", "")
	p.Build = func(context.Context) (*Command, error) { return nil, fmt.Errorf("prepare: %w", briefErr{}) }
	s := runSupervisor(t, Options{Programs: []Program{p}})
	st := waitState(t, s, "app", 30*time.Second, Fatal)
	if st.Detail != "awaits runtime X" {
		t.Errorf("FATAL detail = %q, want the brief %q", st.Detail, "awaits runtime X")
	}
}

func TestWedgedProgramRestarted(t *testing.T) {
	dir := progDir(t, "svc")
	probe := &flakyProbe{}
	probe.healthy.Store(true)
	p := helperProgram(t, dir, "svc", "sleep", "")
	p.Probe, p.HealthInterval, p.WedgeFailures = probe, 20*time.Millisecond, 3
	s := runSupervisor(t, Options{Programs: []Program{p}})
	first := waitState(t, s, "svc", 30*time.Second, Running)
	probe.healthy.Store(false)
	waitState(t, s, "svc", 30*time.Second, Stopping, Starting)
	probe.healthy.Store(true)
	second := waitState(t, s, "svc", 30*time.Second, Running)
	if second.PID == first.PID {
		t.Errorf("pid %d after the wedge, want a new process", second.PID)
	}
	waitGone(t, first.PID, 10*time.Second)
}

func TestHealthWaitExpires(t *testing.T) {
	dir := progDir(t, "svc")
	p := helperProgram(t, dir, "svc", "sleep", "")
	// Long enough for each start to write its start record on a loaded
	// machine before the expired wait kills it.
	p.Probe, p.HealthWait, p.StartRetries = &flakyProbe{}, 1500*time.Millisecond, 1
	s := runSupervisor(t, Options{Programs: []Program{p}})
	st := waitState(t, s, "svc", 30*time.Second, Fatal)
	if !strings.Contains(st.Detail, "no healthy answer within 1.5s: unhealthy") {
		t.Errorf("detail = %q", st.Detail)
	}
	if n := len(starts(t, dir)); n != 2 {
		t.Errorf("started %d times, want 2 (startretries 1)", n)
	}
}

func TestLogRotation(t *testing.T) {
	dir := progDir(t, "chatty")
	p := helperProgram(t, dir, "chatty", "write", strconv.Itoa(3<<19)) // 1.5 MiB
	p.Stdout.MaxBytes, p.Stdout.Backups = 1<<20, 2
	s := runSupervisor(t, Options{Programs: []Program{p}})
	waitState(t, s, "chatty", 30*time.Second, Running)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ents, _ := os.ReadDir(dir)
		var names []string
		var total int64
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "chatty.out") {
				names = append(names, e.Name())
				info, _ := e.Info()
				total += info.Size()
				if info.Size() > 1<<20 {
					t.Fatalf("%s is %d bytes, over the 1 MiB limit", e.Name(), info.Size())
				}
			}
		}
		// The child writes its stderr line after the last stdout line, and
		// the two pipes are copied apart: wait for both.
		errLog, _ := os.ReadFile(filepath.Join(dir, "chatty.err.log"))
		if len(names) == 2 && total == (3<<19)/100*100 && string(errLog) == "wrote 1572864\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log files %v (%d bytes), stderr log %q; want chatty.out.log and one backup with 1.5 MiB, and one stderr line, not rotated", names, total, errLog)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, err := os.Stat(filepath.Join(dir, "chatty.err.log")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("stderr log mode = %v, %v; want 0600", st.Mode(), err)
	}
}

func TestNewRejects(t *testing.T) {
	dir := t.TempDir()
	good := helperProgram(t, dir, "good", "sleep", "")
	mk := func(f func(*Program)) Program {
		p := good
		f(&p)
		return p
	}
	progs := []Program{
		mk(func(p *Program) { p.Name = "all" }),
		mk(func(p *Program) { p.Name = "Bad" }),
		mk(func(p *Program) { p.Name = "x"; p.Command = nil }),
		mk(func(p *Program) { p.Name = "y"; p.StopWait = -time.Second }),
		mk(func(p *Program) { p.Name = "z"; p.DependsOn = []string{"w"} }),
		mk(func(p *Program) { p.Name = "w"; p.DependsOn = []string{"z"} }),
		mk(func(p *Program) { p.Name = "v"; p.DependsOn = []string{"nope"} }),
		mk(func(p *Program) { p.Name = "u"; p.User = "no-such-user-hbx" }),
		mk(func(p *Program) { p.Name = "t"; p.Autorestart = "sometimes" }),
	}
	_, err := New(Options{Programs: progs})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("New() = %v, want ErrInvalid", err)
	}
	for _, want := range []string{
		`program "all": bad name`, `program "Bad": bad name`, `program "x": empty command`,
		`program "y": negative stopwaitsecs -1s`, `dependency cycle w -> z -> w`,
		`program "v": depends on "nope", which is not a program`, `program "u": user "no-such-user-hbx": not in the user database`,
		`program "t": autorestart "sometimes"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New() error does not contain %q:\n%v", want, err)
		}
	}
}

func TestSocketAPI(t *testing.T) {
	sockDir, err := os.MkdirTemp("", "hbx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "hbx.sock")
	ctx := context.Background()

	if _, err := Dial(ctx, sock); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Dial() without a supervisor = %v, want ErrNotRunning", err)
	}
	// A stale socket file is replaced.
	if err := os.WriteFile(sock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(ctx, sock); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Dial() on a stale socket = %v, want ErrNotRunning", err)
	}

	dirA, dirB := progDir(t, "a"), progDir(t, "b")
	a := helperProgram(t, dirA, "a", "write", "1000")
	a.Priority = 1
	b := helperProgram(t, dirB, "b", "sleep", "")
	b.Priority, b.DependsOn = 2, []string{"a"}
	s := runSupervisor(t, Options{Programs: []Program{a, b}, Socket: sock})
	waitState(t, s, "b", 30*time.Second, Running)
	// RUNNING is startsecs after the spawn, which a loaded machine reaches
	// before the helper wrote: wait for its output in the log files.
	waitLogSize(t, filepath.Join(dirA, "a.out.log"), 1000)
	waitLogSize(t, filepath.Join(dirA, "a.err.log"), int64(len("wrote 1000\n")))

	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o600 || st.Mode().Type() != os.ModeSocket {
		t.Errorf("socket mode = %v, %v; want a socket with mode 0600", st.Mode(), err)
	}
	// A second supervisor refuses to start.
	s2, _ := New(Options{Programs: []Program{a}, Socket: sock})
	if err := s2.Run(ctx); !errors.Is(err, ErrAlreadyRunning) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("second Run() = %v, want ErrAlreadyRunning naming pid %d", err, os.Getpid())
	}

	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	sts, err := c.Status(ctx)
	if err != nil || len(sts) != 2 || sts[0].Name != "a" || sts[0].State != Running || sts[0].PID == 0 || !strings.HasPrefix(sts[0].Detail, "pid ") {
		t.Errorf("Status() = %+v, %v", sts, err)
	}
	if _, err := c.Start(ctx, "nope"); !errors.Is(err, ErrUnknownProgram) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Start(nope) = %v, want ErrUnknownProgram", err)
	}
	var logs strings.Builder
	if err := c.Logs(ctx, LogsRequest{Name: "a", Lines: 2}, &logs); err != nil || logs.String() != strings.Repeat(strings.Repeat("x", 99)+"\n", 2) {
		t.Errorf("Logs(a, 2) = %q, %v", logs.String(), err)
	}
	logs.Reset()
	if err := c.Logs(ctx, LogsRequest{Name: "a", Stderr: true, Lines: 5}, &logs); err != nil || logs.String() != "wrote 1000\n" {
		t.Errorf("Logs(a, stderr) = %q, %v", logs.String(), err)
	}

	// A hold stops both, refuses starts, and ends with its connection.
	h, err := c.Hold(ctx, "all")
	if err != nil {
		t.Fatalf("Hold(all) = %v", err)
	}
	if diff := cmp.Diff(h.Results, []Result{{Name: "a", State: Stopped, Restart: true}, {Name: "b", State: Stopped, Restart: true}}); diff != "" {
		t.Errorf("Hold results (-got +want):\n%s", diff)
	}
	res, err := c.Start(ctx, "b")
	if err != nil || !strings.Contains(res[0].Error, "held") {
		t.Errorf("Start(b) while held = %+v, %v; want a held error", res, err)
	}
	if sts, _ := c.Status(ctx); !sts[1].Held {
		t.Errorf("Status() while held = %+v, want held", sts)
	}
	h.Release() // as if the holder died: the connection closes
	waitState(t, s, "a", 30*time.Second, Running)
	waitState(t, s, "b", 30*time.Second, Running)

	res, err = c.Restart(ctx, "a")
	if err != nil || res[0].State != Running || res[0].Error != "" {
		t.Errorf("Restart(a) = %+v, %v", res, err)
	}
	res, err = c.Stop(ctx, "all")
	if err != nil || len(res) != 2 || res[0].State != Stopped || res[1].State != Stopped {
		t.Errorf("Stop(all) = %+v, %v", res, err)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown() = %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(sock); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("socket still there after shutdown")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitLogSize waits until the file at path has at least size bytes.
func waitLogSize(t *testing.T, path string, size int64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, err := os.Stat(path); err == nil && st.Size() >= size {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has not reached %d bytes in 30s", path, size)
		}
	}
}

func TestUptime(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0:00:00", 65 * time.Second: "0:01:05", 26*time.Hour + 3*time.Second: "1 days, 2:00:03",
	} {
		if got := Uptime(d); got != want {
			t.Errorf("Uptime(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestLastLines(t *testing.T) {
	tests := []struct {
		content string
		n       int
		want    string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\n", 5, "a\nb\n"},
		{"a\nb\n", 0, ""},
		{"", 3, ""},
		{strings.Repeat("l\n", 40000), 1, "l\n"},
	}
	for _, tt := range tests {
		p := filepath.Join(t.TempDir(), "log")
		os.WriteFile(p, []byte(tt.content), 0o600)
		var b strings.Builder
		if err := tailFile(p, tt.n, nil, 0, &b, func() {}); err != nil || b.String() != tt.want {
			t.Errorf("tailFile(%q, %d) = %q, %v; want %q", tt.content[:min(len(tt.content), 10)], tt.n, b.String(), err, tt.want)
		}
	}
}

var _ = syscall.SIGTERM
