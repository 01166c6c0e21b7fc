package health

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/supervision"
)

func TestDataDir(t *testing.T) {
	me := strconv.Itoa(os.Getuid())
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string) string // returns the path to check
		owner   string
		wantErr string
	}{
		{"0700", func(t *testing.T, d string) string { return d }, me, ""},
		{"0500", func(t *testing.T, d string) string { os.Chmod(d, 0o500); return d }, me, ""},
		{"0755", func(t *testing.T, d string) string { os.Chmod(d, 0o755); return d }, me, "is mode 0755, want 0700 or stricter"},
		{"0710", func(t *testing.T, d string) string { os.Chmod(d, 0o710); return d }, me, "is mode 0710, want 0700 or stricter"},
		{"missing", func(t *testing.T, d string) string { return filepath.Join(d, "nope") }, me, "no such file or directory"},
		{"a file", func(t *testing.T, d string) string {
			p := filepath.Join(d, "f")
			write(t, p, "", 0o600)
			return p
		}, me, "is not a directory"},
		{"other owner", func(t *testing.T, d string) string { return d }, strconv.Itoa(os.Getuid() + 4242), "want uid " + strconv.Itoa(os.Getuid()+4242)},
		{"unknown owner", func(t *testing.T, d string) string { return d }, "no-such-user-hbx", `owner: user "no-such-user-hbx"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(dir, 0o700) })
			_, err := DataDir(tt.setup(t, dir), tt.owner)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("DataDir() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrDataDir) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("DataDir() = %v, want ErrDataDir containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestKey(t *testing.T) {
	const secret = "s3cr3t-key-value"
	k := NewKey(" " + secret + "\n")
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "key", k)
	js, _ := json.Marshal(struct{ K Key }{k})
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s %q", k, k, k, k, k), logged.String(), string(js)} {
		if strings.Contains(s, secret) || !strings.Contains(s, "[redacted]") {
			t.Errorf("a rendering of the key = %q, want [redacted]", s)
		}
	}
	if k.v != secret {
		t.Errorf("NewKey() holds %q, want the trimmed key", k.v)
	}

	dir := t.TempDir()
	good, open, empty := filepath.Join(dir, "good"), filepath.Join(dir, "open"), filepath.Join(dir, "empty")
	unicode, words := filepath.Join(dir, "unicode"), filepath.Join(dir, "words")
	write(t, good, secret+"\nsecond line\n", 0o600)
	write(t, open, secret+"\n", 0o644)
	write(t, empty, "\n", 0o400)
	// The header would carry it to Bun as Latin-1, executor.token_file's
	// environment variable as UTF-8: two different keys.
	write(t, unicode, secret+"\u043a\u043b\u044e\u0447\n", 0o600)
	write(t, words, secret+" "+secret+"\n", 0o600)
	huge := filepath.Join(dir, "huge") // a header no server takes
	write(t, huge, strings.Repeat("a", 32<<10)+"\n", 0o600)
	if k, err := ReadKeyFile(good); err != nil || k.v != secret {
		t.Errorf("ReadKeyFile(good) = %v, want the first line", err)
	}
	for path, want := range map[string]string{
		open:                          "is mode 0644, want 0600 or stricter",
		empty:                         "the first line is empty",
		unicode:                       "the first line is not one key",
		words:                         "the first line is not one key",
		huge:                          "the first line is not one key",
		filepath.Join(dir, "missing"): "no such file",
		dir:                           "is a directory: not a regular file",
	} {
		_, err := ReadKeyFile(path)
		if !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), secret) {
			t.Errorf("ReadKeyFile(%s) = %v, want ErrKey containing %q and not the key", path, err, want)
		}
	}
	if _, err := ReadKey(strings.NewReader("")); !errors.Is(err, ErrKey) {
		t.Errorf("ReadKey(empty) = %v, want ErrKey", err)
	}
}

// fakeSupervisor is a Supervisor with a fixed answer.
type fakeSupervisor struct {
	progs []Program
	err   error
}

func (f fakeSupervisor) Programs(context.Context) ([]Program, error) { return f.progs, f.err }

func TestSupervisorCheck(t *testing.T) {
	running := []Program{{"executor", supervision.Running, 10, "pid 10, uptime 0:01:00", ""}, {"hermes", supervision.Running, 11, "", ""}}
	stale := "state /workspace/hermes-home/gateway_state.json is stale (written 2m1s ago, the bound is 2m0s)"
	tests := []struct {
		name       string
		sup        Supervisor
		want       []string
		wantStatus Status
		wantReason string
	}{
		{"all running", fakeSupervisor{progs: running}, []string{"executor", "hermes"}, Pass, "executor RUNNING pid 10, hermes RUNNING pid 11"},
		{"none", nil, nil, Skip, "no supervisor is configured"},
		{"not running", fakeSupervisor{err: fmt.Errorf("%w (nothing listens on /run/x.sock)", ErrNoSupervisor)}, nil, Skip,
			"no supervisor is running (nothing listens on /run/x.sock)"},
		{"broken socket", fakeSupervisor{err: errors.New("talk to supervisor: EOF")}, nil, Fail, "talk to supervisor: EOF"},
		{"one fatal", fakeSupervisor{progs: []Program{running[0], {"hermes", supervision.Fatal, 0, "command not found", ""}}}, nil, Fail,
			"hermes FATAL (command not found)"},
		{"configured but absent", fakeSupervisor{progs: running[:1]}, []string{"executor", "hermes"}, Fail,
			"hermes is configured but not supervised"},
		{"running but its state file stale", fakeSupervisor{progs: []Program{running[0], {"hermes", supervision.Running, 11, "", stale}}}, nil, Fail,
			"hermes RUNNING pid 11 but not live: " + stale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := Run(context.Background(), Options{Supervisor: tt.sup, Programs: tt.want}, []string{CheckSupervisor})
			if err != nil {
				t.Fatal(err)
			}
			r := rep.Checks[0]
			if r.Status != tt.wantStatus || !strings.Contains(r.Reason, tt.wantReason) {
				t.Errorf("supervisor check = %s %q, want %s containing %q", r.Status, r.Reason, tt.wantStatus, tt.wantReason)
			}
		})
	}
}

func TestExecutorPID(t *testing.T) {
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "executor.pid")
	write(t, pidfile, strconv.Itoa(os.Getpid())+"\n", 0o644)
	stale := filepath.Join(dir, "stale.pid")
	write(t, stale, "4194305\n", 0o644)
	garbage := filepath.Join(dir, "garbage.pid")
	write(t, garbage, "bun\n", 0o644)
	noSup := fakeSupervisor{err: ErrNoSupervisor}
	fifo := filepath.Join(dir, "fifo.pid")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	write(t, secret, "hunter2\n", 0o600)
	secretLink := filepath.Join(dir, "secret.pid")
	zeroLink := filepath.Join(dir, "zero.pid")
	for l, target := range map[string]string{secretLink: secret, zeroLink: "/dev/zero"} {
		if err := os.Symlink(target, l); err != nil {
			t.Fatal(err)
		}
	}
	lockedData := filepath.Join(dir, "data")
	lf, err := os.OpenFile(filepath.Join(dir, ".data.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	otherPidfile := filepath.Join(dir, "other.pid")
	write(t, otherPidfile, strconv.Itoa(other.Process.Pid)+"\n", 0o644)
	huge := filepath.Join(dir, "huge.pid")
	write(t, huge, strings.Repeat("1", 100), 0o644)
	tests := []struct {
		name     string
		o        Options
		wantPID  int
		wantFrom string
		wantErr  string
	}{
		{"supervisor", Options{Supervisor: fakeSupervisor{progs: []Program{{"executor", supervision.Running, 77, "", ""}}}, ExecutorProgram: "executor"}, 77, "the supervisor", ""},
		{"supervisor, stopped", Options{Supervisor: fakeSupervisor{progs: []Program{{"executor", supervision.Stopped, 0, "stopped", ""}}}, ExecutorProgram: "executor", PidFile: pidfile},
			0, "", "executor is not running: STOPPED under the supervisor (stopped)"},
		{"supervisor without it", Options{Supervisor: fakeSupervisor{progs: []Program{}}, ExecutorProgram: "executor"}, 0, "", `the supervisor runs no program "executor"`},
		{"pidfile", Options{Supervisor: noSup, PidFile: pidfile}, os.Getpid(), "pidfile " + pidfile, ""},
		{"no pidfile", Options{Supervisor: noSup, PidFile: filepath.Join(dir, "none")}, 0, "", "no supervisor answers and there is no pidfile"},
		{"stale pidfile", Options{Supervisor: noSup, PidFile: stale}, 0, "", "names pid 4194305, which is gone"},
		{"garbage pidfile", Options{PidFile: garbage}, 0, "", `does not hold a pid (4 bytes)`},
		// The state directory is the payload's: a pidfile it made a FIFO,
		// a link to a secret or to an endless file is refused at once,
		// its content never quoted.
		{"fifo pidfile", Options{Supervisor: noSup, PidFile: fifo}, 0, "", "is a FIFO: not a regular file"},
		{"pidfile links to a secret", Options{Supervisor: noSup, PidFile: secretLink}, 0, "", "too many levels of symbolic links"},
		{"pidfile links to /dev/zero", Options{Supervisor: noSup, PidFile: zeroLink}, 0, "", "too many levels of symbolic links"},
		{"huge pidfile", Options{Supervisor: noSup, PidFile: huge}, 0, "", "larger than 64 bytes"},
		// The payload of hbx run executor holds the data lock (here this
		// test process does); a live pid that does not is not it.
		{"pidfile, pid holds the data lock", Options{Supervisor: noSup, PidFile: pidfile, DataDir: lockedData}, os.Getpid(), "pidfile " + pidfile, ""},
		{"pidfile, pid does not hold the data lock", Options{Supervisor: noSup, PidFile: otherPidfile, DataDir: lockedData}, 0, "", "which does not hold the data lock"},
		{"pidfile, no data lock", Options{Supervisor: noSup, PidFile: pidfile, DataDir: filepath.Join(dir, "nolock", "data")}, 0, "", "but there is no data lock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid, from, err := executorPID(context.Background(), &tt.o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "hunter2") {
					t.Errorf("executorPID() = %d, %v; want error containing %q", pid, err, tt.wantErr)
				}
				return
			}
			if err != nil || pid != tt.wantPID || from != tt.wantFrom {
				t.Errorf("executorPID() = %d, %q, %v; want %d, %q", pid, from, err, tt.wantPID, tt.wantFrom)
			}
		})
	}
}

func TestRun(t *testing.T) {
	release := make(chan struct{})
	wedged := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer wedged.Close()
	defer close(release)
	host, port, _ := net.SplitHostPort(wedged.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	dataDir := t.TempDir()
	os.Chmod(dataDir, 0o700)
	opts := Options{Listen: host, Port: p, Timeout: 200 * time.Millisecond, DataDir: dataDir, DataDirOwner: strconv.Itoa(os.Getuid()), Tools: []string{"execute"}}

	if _, err := Run(context.Background(), opts, []string{"api-health", "bogus"}); !errors.Is(err, ErrUnknownCheck) || !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("Run(only bogus) = %v, want ErrUnknownCheck naming it", err)
	}

	start := time.Now()
	rep, err := Run(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Run() against a wedged server took %s, want about the 200ms timeout", took)
	}
	var names []string
	got := map[string]Result{}
	for _, r := range rep.Checks {
		names = append(names, r.Name)
		got[r.Name] = r
	}
	if diff := cmp.Diff(names, Names()); diff != "" {
		t.Errorf("Run() checks (-got +want):\n%s", diff)
	}
	want := map[string]Status{
		CheckAPIHealth: Fail, CheckWebUI: Fail, CheckMCPAuth: Fail, CheckMCPTools: Skip,
		CheckSupervisor: Skip, CheckRelease: Fail, CheckListeners: Fail, CheckDataDir: Pass,
	}
	for name, st := range want {
		if got[name].Status != st {
			t.Errorf("check %s = %s %q, want %s", name, got[name].Status, got[name].Reason, st)
		}
	}
	if rep.Status != Fail || !strings.Contains(got[CheckAPIHealth].Reason, "context deadline exceeded") || strings.HasPrefix(got[CheckAPIHealth].Reason, "unhealthy") {
		t.Errorf("Run() = %s, api-health %q; want fail with the timeout as reason", rep.Status, got[CheckAPIHealth].Reason)
	}

	rep, err = Run(context.Background(), opts, []string{CheckDataDir, CheckMCPTools})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rep)
	var doc struct {
		Status string           `json:"status"`
		Checks []map[string]any `json:"checks"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Status != "pass" || len(doc.Checks) != 2 || doc.Checks[0]["name"] != CheckMCPTools || doc.Checks[1]["name"] != CheckDataDir {
		t.Errorf("Run(only data-dir, mcp-tools) = %s, want pass with mcp-tools then data-dir", b)
	}
	for _, c := range doc.Checks {
		if _, ok := c["duration_ms"].(float64); !ok || len(c) != 4 || c["reason"] == "" {
			t.Errorf("check %v: want name, status, reason and a numeric duration_ms", c)
		}
	}
}

func TestWait(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	opts := Options{DataDir: dataDir, DataDirOwner: strconv.Itoa(os.Getuid())}
	start := time.Now() // before the goroutine, so the directory comes 300ms after it at the earliest
	go func() {
		time.Sleep(300 * time.Millisecond)
		os.Mkdir(dataDir, 0o700)
	}()
	rep, err := Wait(context.Background(), opts, []string{CheckDataDir}, 10*time.Second, 50*time.Millisecond)
	if err != nil || rep.Status != Pass || time.Since(start) < 300*time.Millisecond {
		t.Errorf("Wait() = %+v, %v after %s; want a pass after the directory appeared", rep, err, time.Since(start))
	}
	opts.DataDir = filepath.Join(dataDir, "never")
	start = time.Now()
	rep, err = Wait(context.Background(), opts, []string{CheckDataDir}, 200*time.Millisecond, 50*time.Millisecond)
	if took := time.Since(start); err != nil || rep.Status != Fail || took < 200*time.Millisecond || took > 5*time.Second {
		t.Errorf("Wait() = %+v, %v after %s; want a fail after 200ms", rep, err, took)
	}
	// ctx ends before d: ctx's error, with the last report and its reason.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	rep, err = Wait(ctx, opts, []string{CheckDataDir}, time.Minute, 50*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || rep == nil || rep.Status != Fail || !strings.Contains(rep.Checks[0].Reason, "never") {
		t.Errorf("Wait(ctx ends first) = %+v, %v; want the last failed report and DeadlineExceeded", rep, err)
	}
}

// TestReadKeyFileFIFO: a FIFO named as the token file is refused at once,
// never waited on.
func TestReadKeyFileFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "key")
	if err := unix.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadKeyFile(p); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), p+" is a FIFO") {
			t.Errorf("ReadKeyFile(fifo) = %v, want ErrKey naming %s as a FIFO", err, p)
		}
	case <-time.After(10 * time.Second):
		if f, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("ReadKeyFile(fifo) blocked")
	}
}

// TestReportErr: a report's failure names the failed checks.
func TestReportErr(t *testing.T) {
	rep := &Report{Status: Fail, Checks: []Result{
		{Name: CheckAPIHealth, Status: Pass, Duration: 12 * time.Millisecond, Reason: "200, status ok"},
		{Name: CheckRelease, Status: Fail, Duration: 3 * time.Millisecond, Reason: "not the configured image"},
		{Name: CheckMCPTools, Status: Skip, Reason: "no key"},
	}}
	if err := rep.Err(); !errors.Is(err, ErrFailed) || err.Error() != "failed: release" {
		t.Errorf("Err() = %v, want ErrFailed naming release", err)
	}
	if err := (&Report{Status: Pass, Checks: rep.Checks[:1]}).Err(); err != nil {
		t.Errorf("Err(pass) = %v, want nil", err)
	}
}

// seqSupervisor reports its states in turn, one a call, then the last
// one for good.
type seqSupervisor struct {
	mu     sync.Mutex
	states []supervision.State
	calls  int
}

func (s *seqSupervisor) Programs(context.Context) ([]Program, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.states[min(s.calls, len(s.states)-1)]
	s.calls++
	pid := 0
	if st == supervision.Running {
		pid = 10
	}
	return []Program{{Name: "executor", State: st, PID: pid, Detail: "detail"}}, nil
}

// TestWaitStart: hbx health --wait-start retries while the supervisor is
// making progress (STARTING, BACKOFF) and stops at the first other state:
// a pass once RUNNING, a fail at once on FATAL or STOPPED, never the
// whole wait; the supervisor check's error is ErrStarting only while
// starting.
func TestWaitStart(t *testing.T) {
	tests := []struct {
		name      string
		states    []supervision.State
		want      Status
		wantCalls int
	}{
		{"installing then running", []supervision.State{supervision.Starting, supervision.Backoff, supervision.Starting, supervision.Running}, Pass, 4},
		{"installing then fatal", []supervision.State{supervision.Starting, supervision.Backoff, supervision.Fatal}, Fail, 3},
		{"stopped at once", []supervision.State{supervision.Stopped, supervision.Running}, Fail, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sup := &seqSupervisor{states: tt.states}
			start := time.Now()
			rep, err := WaitStart(context.Background(), Options{Supervisor: sup}, []string{CheckSupervisor}, time.Minute, 10*time.Millisecond)
			if took := time.Since(start); err != nil || rep.Status != tt.want || sup.calls != tt.wantCalls || took > 30*time.Second {
				t.Errorf("WaitStart(%v) = %+v, %v after %d calls and %v; want %s after %d calls", tt.states, rep, err, sup.calls, took, tt.want, tt.wantCalls)
			}
		})
	}
	// Without the supervisor check among the checks: one run.
	sup := &seqSupervisor{states: []supervision.State{supervision.Starting}}
	rep, err := WaitStart(context.Background(), Options{Supervisor: sup, DataDir: filepath.Join(t.TempDir(), "none")}, []string{CheckDataDir}, time.Minute, 10*time.Millisecond)
	if err != nil || rep.Status != Fail || sup.calls != 0 {
		t.Errorf("WaitStart(data-dir only) = %+v, %v after %d supervisor calls; want one failed run", rep, err, sup.calls)
	}
	// The check's error: ErrStarting while starting, not once one is FATAL.
	if _, err := checkPrograms([]Program{{Name: "executor", State: supervision.Starting}, {Name: "hermes", State: supervision.Backoff}}, nil); !errors.Is(err, ErrStarting) {
		t.Errorf("checkPrograms(STARTING, BACKOFF) = %v, want ErrStarting", err)
	}
	if _, err := checkPrograms([]Program{{Name: "executor", State: supervision.Starting}, {Name: "hermes", State: supervision.Fatal}}, nil); errors.Is(err, ErrStarting) {
		t.Errorf("checkPrograms(STARTING, FATAL) = %v, want not ErrStarting", err)
	}
	// A RUNNING program whose liveness probe fails is not progress: a
	// --wait-start must not wait on it because another one is starting.
	notLive := []Program{{Name: "executor", State: supervision.Backoff}, {Name: "hermes", State: supervision.Running, PID: 7, Unhealthy: "state file is stale"}}
	if _, err := checkPrograms(notLive, nil); err == nil || errors.Is(err, ErrStarting) {
		t.Errorf("checkPrograms(BACKOFF, RUNNING not live) = %v, want a failure that is not ErrStarting", err)
	}
}

// TestWaitStopsOnFatal: hbx health --wait retries every failure (a
// program STOPPED or STARTING may come up) but stops at the first run
// with a program FATAL, which only an operator's start mends; the
// report's error then wraps ErrFatal and says which program and why.
func TestWaitStopsOnFatal(t *testing.T) {
	for _, tt := range []struct {
		name      string
		states    []supervision.State
		want      Status
		wantCalls int
	}{
		{"stopped then running", []supervision.State{supervision.Stopped, supervision.Starting, supervision.Running}, Pass, 3},
		{"starting then fatal", []supervision.State{supervision.Starting, supervision.Fatal, supervision.Running}, Fail, 2},
		{"fatal at once", []supervision.State{supervision.Fatal, supervision.Running}, Fail, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sup := &seqSupervisor{states: tt.states}
			rep, err := Wait(context.Background(), Options{Supervisor: sup}, []string{CheckSupervisor}, time.Minute, 10*time.Millisecond)
			if err != nil || rep.Status != tt.want || sup.calls != tt.wantCalls {
				t.Fatalf("Wait(%v) = %+v, %v after %d calls; want %s after %d calls", tt.states, rep, err, sup.calls, tt.want, tt.wantCalls)
			}
			if err := rep.Err(); tt.want == Fail && (!errors.Is(err, ErrFailed) || !errors.Is(err, ErrFatal) || err.Error() != "failed: supervisor; executor FATAL (detail)") {
				t.Errorf("Err() = %v, want ErrFailed and ErrFatal, naming executor FATAL and its detail", err)
			}
		})
	}
}
