package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/procscan"
	"github.com/hermesbox/hbx/supervisor"
)

// The Hermes gateway cannot be installed here (PyPI is unreachable), so
// these tests run the default hermes program on a stand-in that follows
// its contract: testdata/hermes-gateway-standin.py (Debian's python3).

// hermesBox is an hbx config whose executor is off and whose hermes
// program keeps every default but the command (the stand-in, 2 s start),
// the directory, the user (root) and HERMES_HOME (in the test's
// directory); it returns the config, the socket and HERMES_HOME.
func hermesBox(t *testing.T, extraEnv string) (cfg, sock, home string) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Fatalf("python3 (the Hermes stand-in's interpreter) is missing: run .ci/run/testdeps or scripts/testdeps.sh: %v", err)
	}
	dir := t.TempDir()
	sockDir, err := os.MkdirTemp("", "hbx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock, home = filepath.Join(sockDir, "hbx.sock"), filepath.Join(dir, "hermes-home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	standin, err := filepath.Abs("testdata/hermes-gateway-standin.py")
	if err != nil {
		t.Fatal(err)
	}
	c := fmt.Sprintf(`executor:
  runtime_dir: %s
  data_dir: %s
  state_dir: %s
  port: %d
supervisor:
  socket: %s
  log_dir: %s
programs:
  executor:
    enabled: false
  hermes:
    command: [/usr/bin/python3, %s, gateway, run, --replace]
    user: ""
    directory: %s
    depends_on: []
    environment:
      HOME: %s
      HERMES_HOME: %s
      PATH: /usr/local/bin:/usr/bin:/bin
      HERMES_GATEWAY_EXTERNAL_SUPERVISOR: "1"
      STANDIN_START_SECS: "2"
      STANDIN_REFRESH_SECS: "1"
%s`, filepath.Join(dir, "runtime"), filepath.Join(dir, "data"), filepath.Join(dir, "state"), freePort(t),
		sock, filepath.Join(dir, "log"), standin, dir, dir, home, extraEnv)
	cfg = filepath.Join(dir, "hbx.yaml")
	if err := os.WriteFile(cfg, []byte(c), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killRecorded(home, "helper.pid", "detached-restart.pid") })
	return cfg, sock, home
}

// killRecorded sends SIGKILL to the stand-in's helpers whose pid files
// are in home (only while they still run the stand-in).
func killRecorded(home string, files ...string) {
	for _, f := range files {
		if pid := pidIn(home, f); pid > 0 {
			procscan.Signal(pid, syscall.SIGKILL, runsStandin)
		}
	}
}

// waitPidIn waits for a pid file of the stand-in and returns its pid.
func waitPidIn(t *testing.T, home, file string) int {
	t.Helper()
	deadline := time.Now().Add(slow(t, 30*time.Second))
	for {
		if pid := pidIn(home, file); pid > 0 {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stand-in wrote no %s", file)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pidIn reads a pid file of the stand-in; 0 when absent.
func pidIn(home, file string) int {
	b, err := os.ReadFile(filepath.Join(home, file))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// runsStandin reports whether pid runs the gateway stand-in: the proof
// for procscan.Signal that a recorded pid is still one of the test's.
func runsStandin(pid int) bool { return strings.Contains(cmdline(pid), "hermes-gateway-standin") }

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// superviseWith starts hbx supervise on cfg with env added to its own
// environment; it is stopped at the end of the test.
func superviseWith(t *testing.T, cfg string, env ...string) {
	t.Helper()
	cmd := exec.Command(binary(t), "--config", cfg, "supervise")
	cmd.Env = append(cleanEnv(), env...)
	logPath := filepath.Join(filepath.Dir(cfg), "supervise.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logf.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(slow(t, 60*time.Second)):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("hbx supervise log:\n%s", b)
		}
	})
}

// hermesStatus polls the supervisor on sock until cond holds for the
// hermes program, and returns that status.
func hermesStatus(t *testing.T, sock string, timeout time.Duration, what string, cond func(supervisor.Status) bool) supervisor.Status {
	t.Helper()
	deadline := time.Now().Add(slow(t, timeout))
	var last supervisor.Status
	for {
		if c, err := supervisor.Dial(context.Background(), sock); err == nil {
			if sts, err := c.Status(context.Background()); err == nil {
				for _, st := range sts {
					if st.Name == "hermes" {
						last = st
					}
				}
				if cond(last) {
					return last
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("hermes = %s %q; want %s", last.State, last.Detail, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHermesGatewayE2E runs the default hermes program on the stand-in:
// STARTING ("not ready") until its tree holds gateway.lock and its state
// says running, then RUNNING; its environment holds nothing of hbx's
// own; hbx logs --file follows its gateway.log; SIGUSR1 (exit 75)
// restarts it at once; hbx stop sends SIGINT (a planned stop, exit 0)
// and does not wait the 210 s stopwaitsecs.
func TestHermesGatewayE2E(t *testing.T) {
	requireE2E(t)
	if os.Geteuid() != 0 {
		t.Fatal("TestHermesGatewayE2E runs as root (make e2e does)")
	}
	cfg, sock, home := hermesBox(t, "")
	superviseWith(t, cfg, "HBXTEST_OWN_VARIABLE=hbx-only", "https_proxy=http://proxy.invalid:3128")
	st := hermesStatus(t, sock, 30*time.Second, "STARTING not ready", func(st supervisor.Status) bool {
		return st.State == supervisor.Starting && strings.Contains(st.Detail, "not ready")
	})
	t.Logf("before it is ready: %s %q", st.State, st.Detail)
	first := hermesStatus(t, sock, 60*time.Second, "RUNNING", func(st supervisor.Status) bool { return st.State == supervisor.Running })
	if got := cmdline(first.PID); !strings.Contains(got, "gateway run --replace") {
		t.Errorf("hermes runs %q", got)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", first.PID))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(environ), "\x00") {
		k, _, _ := strings.Cut(kv, "=")
		if k == "HBXTEST_OWN_VARIABLE" || k == "https_proxy" || k == "PWD" || kv == "HOME=/root" {
			t.Errorf("hermes's environment holds hbx's own %s", kv)
		}
	}
	if !strings.Contains(string(environ), "HERMES_GATEWAY_EXTERNAL_SUPERVISOR=1\x00") {
		t.Errorf("hermes's environment lacks HERMES_GATEWAY_EXTERNAL_SUPERVISOR=1: %q", environ)
	}
	logs := exec.Command(binary(t), "--config", cfg, "logs", "hermes", "--file", "-n", "50")
	logs.Env = cleanEnv()
	if out, err := logs.CombinedOutput(); err != nil || !strings.Contains(string(out), "running") {
		t.Errorf("hbx logs hermes --file = %q, %v; want the gateway's own log", out, err)
	}

	// SIGUSR1: a graceful restart, exit 75, started again at once.
	firstHelper := waitPidIn(t, home, "helper.pid")
	if err := os.Remove(filepath.Join(home, "helper.pid")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(first.PID, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	second := hermesStatus(t, sock, 60*time.Second, "RUNNING again with a new pid", func(st supervisor.Status) bool {
		if st.State == supervisor.Backoff || st.State == supervisor.Fatal {
			t.Fatalf("after exit 75: %s %q, want a restart without backoff", st.State, st.Detail)
		}
		return st.State == supervisor.Running && st.PID != 0 && st.PID != first.PID
	})
	secondHelper := waitPidIn(t, home, "helper.pid")

	// hbx stop: SIGINT, exit 0, quickly.
	start := time.Now()
	stop := exec.Command(binary(t), "--config", cfg, "stop", "hermes")
	stop.Env = cleanEnv()
	if out, err := stop.CombinedOutput(); err != nil {
		t.Fatalf("hbx stop hermes = %v\n%s", err, out)
	}
	if took := time.Since(start); took > slow(t, 30*time.Second) {
		t.Errorf("hbx stop hermes took %s, want the gateway's own quick exit, not stopwaitsecs", took)
	}
	glog := readFile(t, filepath.Join(home, "logs", "gateway.log"))
	if !strings.Contains(glog, fmt.Sprintf("gateway[%d]: SIGINT: planned stop", second.PID)) || strings.Contains(glog, "unexpected kill") {
		t.Errorf("gateway.log = %q, want the second gateway's SIGINT and no SIGTERM", glog)
	}
	if state := readFile(t, filepath.Join(home, "gateway_state.json")); !strings.Contains(state, `"stopped"`) {
		t.Errorf("gateway_state.json = %s, want stopped", state)
	}
	// Its helpers started a new session and closed their descriptors:
	// only the program's cgroup sees them, and the stop ended them.
	if c, err := supervisor.Dial(context.Background(), sock); err != nil {
		t.Fatal(err)
	} else if in, err := c.Info(context.Background()); err != nil || in.Cgroups == "" {
		t.Fatalf("GET /v1/info = %+v, %v; want the programs' cgroups (this host mounts cgroup v2)", in, err)
	}
	for _, pid := range []int{firstHelper, secondHelper} {
		if pid == 0 || !processGone(pid) {
			t.Errorf("the gateway's new-session helper %d outlived hbx stop (or never ran)", pid)
		}
	}
}

// TestHermesKilledSupervisorE2E: after kill -9 of hbx supervise, the next
// one stops what the dead one's gateway left: its new-session helper with
// descriptors closed, found in the program's cgroup.
func TestHermesKilledSupervisorE2E(t *testing.T) {
	requireE2E(t)
	cfg, sock, home := hermesBox(t, "")
	cmd := exec.Command(binary(t), "--config", cfg, "supervise")
	cmd.Env = cleanEnv()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // a failure before the kill below
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	first := hermesStatus(t, sock, 60*time.Second, "RUNNING", func(st supervisor.Status) bool { return st.State == supervisor.Running })
	t.Cleanup(func() { // a failure before the next supervisor took over
		procscan.Signal(first.PID, syscall.SIGKILL, runsStandin)
	})
	helper := waitPidIn(t, home, "helper.pid")
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if processGone(helper) {
		t.Fatalf("the helper %d died with the supervisor; the test shows nothing", helper)
	}
	superviseWith(t, cfg)
	second := hermesStatus(t, sock, 60*time.Second, "RUNNING again", func(st supervisor.Status) bool {
		return st.State == supervisor.Running && st.PID != 0 && st.PID != first.PID
	})
	if !processGone(helper) || !processGone(first.PID) {
		t.Errorf("after the next supervisor started hermes (pid %d), the dead one's gateway %d or its helper %d still runs", second.PID, first.PID, helper)
	}
}

// TestHermesFatalConfigE2E: the stand-in's fatal configuration (exit 78)
// makes hermes FATAL at once, with the code and its last stderr line, and
// it is not started again.
func TestHermesFatalConfigE2E(t *testing.T) {
	requireE2E(t)
	cfg, sock, home := hermesBox(t, "")
	if err := os.WriteFile(filepath.Join(home, "config.yaml"), []byte("platforms: fatal\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	superviseWith(t, cfg)
	st := hermesStatus(t, sock, 60*time.Second, "FATAL", func(st supervisor.Status) bool { return st.State == supervisor.Fatal })
	for _, want := range []string{"exit status 78", "no platform is configured"} {
		if !strings.Contains(st.Detail, want) {
			t.Errorf("FATAL detail %q lacks %q", st.Detail, want)
		}
	}
	if n := strings.Count(readFile(t, filepath.Join(home, "logs", "gateway.log")), "starting;"); n != 1 {
		t.Errorf("the gateway started %d times, want 1", n)
	}
}

// TestHermesBackupE2E: hbx backup holds the gateway (SIGINT, a planned
// stop) while it archives, then brings it back ready: RUNNING again with
// a new pid, its lock held and its state running.
func TestHermesBackupE2E(t *testing.T) {
	requireE2E(t)
	cfg, sock, home := hermesBox(t, "")
	dir := filepath.Dir(cfg)
	pass := filepath.Join(dir, "backup.pass")
	if err := os.WriteFile(pass, []byte("correct horse battery staple\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "backup:\n  dir: %s\n  passphrase_file: %s\n  health_wait: 60s\n", filepath.Join(dir, "backups"), pass)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	superviseWith(t, cfg)
	first := hermesStatus(t, sock, 60*time.Second, "RUNNING", func(st supervisor.Status) bool { return st.State == supervisor.Running })
	backup := exec.Command(binary(t), "--config", cfg, "backup")
	backup.Env = cleanEnv()
	if out, err := backup.CombinedOutput(); err != nil {
		t.Fatalf("hbx backup = %v\n%s", err, out)
	}
	st := hermesStatus(t, sock, 60*time.Second, "RUNNING after the backup", func(st supervisor.Status) bool {
		return st.State == supervisor.Running && st.PID != 0 && st.PID != first.PID
	})
	glog := readFile(t, filepath.Join(home, "logs", "gateway.log"))
	if !strings.Contains(glog, fmt.Sprintf("gateway[%d]: SIGINT: planned stop", first.PID)) {
		t.Errorf("gateway.log = %q, want the held gateway's SIGINT", glog)
	}
	if !strings.Contains(glog, fmt.Sprintf("gateway[%d]: running", st.PID)) {
		t.Errorf("gateway.log = %q, want the gateway back running after the backup", glog)
	}
}

// TestHermesStaleStateE2E: while RUNNING, a gateway whose
// gateway_state.json stops being refreshed (the stand-in's wedged mode;
// ready_max_age 3 s for the test, 120 s by default) makes hbx health's
// supervisor check fail, naming the file and its age, and hbx status
// say it; it passes again once the gateway refreshes its state.
func TestHermesStaleStateE2E(t *testing.T) {
	requireE2E(t)
	if os.Geteuid() != 0 {
		t.Fatal("TestHermesStaleStateE2E runs as root (make e2e does)")
	}
	cfg, sock, home := hermesBox(t, "    ready_max_age: 3\n")
	superviseWith(t, cfg)
	hermesStatus(t, sock, 60*time.Second, "RUNNING", func(st supervisor.Status) bool { return st.State == supervisor.Running })
	health := func() (string, int) {
		cmd := exec.Command(binary(t), "--config", cfg, "health", "--only", "supervisor")
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return string(out), code
	}
	if out, code := health(); code != 0 {
		t.Fatalf("hbx health --only supervisor = %d:\n%s\nwant 0 while the state is fresh", code, out)
	}
	if err := os.WriteFile(filepath.Join(home, "standin-wedged"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(home, "gateway_state.json")
	st := hermesStatus(t, sock, 60*time.Second, "RUNNING, not live", func(st supervisor.Status) bool { return st.Unhealthy != "" })
	if st.State != supervisor.Running || !strings.Contains(st.Unhealthy, "state "+state+" is stale (written ") {
		t.Errorf("hermes = %s %q, unhealthy %q; want RUNNING with the stale state named", st.State, st.Detail, st.Unhealthy)
	}
	out, code := health()
	if code != 1 || !regexp.MustCompile(`hermes RUNNING pid \d+ but not live: state `+regexp.QuoteMeta(state)+` is stale \(written \d+s ago, the bound is 3s\)`).MatchString(out) {
		t.Errorf("hbx health --only supervisor = %d:\n%s\nwant 1 naming the stale state file and its age", code, out)
	}
	if err := os.Remove(filepath.Join(home, "standin-wedged")); err != nil {
		t.Fatal(err)
	}
	hermesStatus(t, sock, 60*time.Second, "live again", func(st supervisor.Status) bool { return st.State == supervisor.Running && st.Unhealthy == "" })
}
