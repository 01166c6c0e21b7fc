package supervisor

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInstallRetriedThenFatal: a failing install is retried StartRetries
// times with backoff, shown as BACKOFF with its error; then the install
// program is FATAL with the install's error and not started, and its
// dependents say what they wait for.
func TestInstallRetriedThenFatal(t *testing.T) {
	dir := progDir(t, "app")
	app := helperProgram(t, dir, "app", "sleep", "")
	app.StartRetries = 2
	dep := helperProgram(t, progDir(t, "dep"), "dep", "sleep", "")
	dep.DependsOn = []string{"app"}
	var s *Supervisor
	var attempts int
	install := func(ctx context.Context, progress func(string)) error {
		attempts++
		return errors.New("fetch index: boom")
	}
	opts := Options{Programs: []Program{app, dep}, Install: install, InstallProgram: "app", BackoffBase: 20 * time.Millisecond}
	runSupervisor(t, opts, &s)
	st := waitState(t, s, "app", 30*time.Second, Fatal)
	if attempts != 3 {
		t.Errorf("install attempts = %d, want 3 (StartRetries 2 retries)", attempts)
	}
	if want := "install failed: fetch index: boom; gave up after 3 attempts"; st.Detail != want {
		t.Errorf("app detail = %q, want %q", st.Detail, want)
	}
	if len(starts(t, dir)) != 0 {
		t.Errorf("app was started after its install failed")
	}
	d := waitState(t, s, "dep", 30*time.Second, Starting)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(d.Detail, "waiting for app to be RUNNING (it is FATAL: install failed: ") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		d = s.Get("dep")
	}
	if !strings.Contains(d.Detail, "(it is FATAL: install failed: ") {
		t.Errorf("dep detail = %q, want it to say app is FATAL and why", d.Detail)
	}
}

// TestInstallProgressThenStart: while the install runs, the install
// program is STARTING with the hook's progress and the others wait; an
// install that fails, then succeeds, starts the program.
func TestInstallProgressThenStart(t *testing.T) {
	app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
	other := helperProgram(t, progDir(t, "other"), "other", "sleep", "")
	var s *Supervisor
	var attempts int
	var during, between, otherDuring Status
	install := func(ctx context.Context, progress func(string)) error {
		attempts++
		if attempts == 1 {
			return errors.New("registry down")
		}
		between = s.Get("app")
		progress("installing the release (1/2 layers)")
		during, otherDuring = s.Get("app"), s.Get("other")
		return nil
	}
	runSupervisor(t, Options{Programs: []Program{app, other}, Install: install, InstallProgram: "app", BackoffBase: 20 * time.Millisecond}, &s)
	waitState(t, s, "app", 30*time.Second, Running)
	waitState(t, s, "other", 30*time.Second, Running)
	if between.State != Starting || between.Detail != "installing the release" {
		t.Errorf("app at the second install = %s %q, want STARTING \"installing the release\"", between.State, between.Detail)
	}
	if during.State != Starting || during.Detail != "installing the release (1/2 layers)" {
		t.Errorf("app during the install = %s %q", during.State, during.Detail)
	}
	if otherDuring.State != Stopped || !strings.Contains(otherDuring.Detail, "the release is being installed first") {
		t.Errorf("other during the install = %s %q", otherDuring.State, otherDuring.Detail)
	}
}

// TestClaim: Claim takes the state lock and the socket's lock without
// creating the socket (so nothing answers on it before Run); a second
// supervisor's Claim is refused with ErrAlreadyRunning; Run after Claim
// serves the socket, and releases both when it returns.
func TestClaim(t *testing.T) {
	state, sock := t.TempDir(), filepath.Join(t.TempDir(), "s.sock")
	prog := func() []Program { return []Program{helperProgram(t, progDir(t, "one"), "one", "sleep", "")} }
	s1, err := New(Options{Programs: prog(), StateDir: state, Socket: sock, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Claim(); err != nil {
		t.Fatalf("Claim() = %v", err)
	}
	if _, err := Dial(context.Background(), sock); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Dial after Claim = %v, want ErrNotRunning (no socket before Run)", err)
	}
	for _, o := range []Options{{StateDir: state}, {Socket: sock}} {
		o.Programs, o.Logger = prog(), testLogger(t)
		s2, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := s2.Claim(); !errors.Is(err, ErrAlreadyRunning) {
			t.Errorf("second Claim() with %+v = %v, want ErrAlreadyRunning", o, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s1.Run(ctx) }()
	waitState(t, s1, "one", 30*time.Second, Running)
	if _, err := Dial(context.Background(), sock); err != nil {
		t.Errorf("Dial while Run runs = %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run() = %v", err)
	}
	s3, err := New(Options{Programs: prog(), StateDir: state, Socket: sock, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s3.Claim(); err != nil {
		t.Errorf("Claim() after Run returned = %v", err)
	}
}

// TestInstallNoRetry: an install error marked NoRetry (a bad
// configuration) is not retried: the install program is FATAL after one
// attempt, with the error's own message.
func TestInstallNoRetry(t *testing.T) {
	dir := progDir(t, "app")
	app := helperProgram(t, dir, "app", "sleep", "")
	app.StartRetries = 3
	var s *Supervisor
	var attempts int
	install := func(ctx context.Context, progress func(string)) error {
		attempts++
		return NoRetry(errors.New("bad registry.certs_dir: /x is not a directory"))
	}
	opts := Options{Programs: []Program{app}, Install: install, InstallProgram: "app", BackoffBase: 20 * time.Millisecond}
	runSupervisor(t, opts, &s)
	st := waitState(t, s, "app", time.Minute, Fatal)
	if attempts != 1 {
		t.Errorf("install attempts = %d, want 1 (not retried)", attempts)
	}
	if want := "install failed: bad registry.certs_dir: /x is not a directory; not retried: retrying cannot help"; st.Detail != want {
		t.Errorf("app detail = %q, want %q", st.Detail, want)
	}
}
