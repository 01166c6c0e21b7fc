package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/supervisor"
)

// The executor container of the Docker box (issue 16): Executor exposed on
// the container's network, gated by the box's fixed key.

// setExecutorKeys adds lines (indented two spaces) to the executor:
// section of the box's config file.
func setExecutorKeys(t *testing.T, b *box, lines string) {
	t.Helper()
	cfg := readFile(t, b.config)
	if !strings.Contains(cfg, "executor:\n") {
		t.Fatalf("%s has no executor: section", b.config)
	}
	writeFile(t, b.config, strings.Replace(cfg, "executor:\n", "executor:\n"+lines, 1), 0o600)
}

// TestNetworkExposureE2E: with executor.exposure network, Executor listens
// on 0.0.0.0 and answers on the machine's own address with the key of
// executor.token_file (handed to the real test image), and hbx health
// passes every check; an Executor whose /mcp answers without a key is
// never RUNNING (readiness) and is restarted when it starts to (wedge);
// one with a second listener off loopback is never RUNNING and fails check
// listeners. The key never shows in any output.
func TestNetworkExposureE2E(t *testing.T) {
	requireE2E(t)
	addrs := nonLoopbackAddrs()
	if len(addrs) == 0 {
		t.Fatal("this machine has no non-loopback IPv4 address to reach a network-exposed Executor on")
	}
	b := installedBox(t)
	socket, dir := supervisorConfig(t, b, "")
	key := strings.Repeat("5a", 32) // 256 bits, as the box's owners mint it
	keyFile := filepath.Join(b.dir, "box.key")
	writeFile(t, keyFile, key+"\n", 0o600)
	env := filepath.Join(b.dir, "executor.env")
	open := filepath.Join(b.dir, "open-mcp") // the test image answers /mcp without a key while it exists
	writeFile(t, env, "HBXTEST_OPEN_MCP_IF="+open+"\n", 0o600)
	setExecutorKeys(t, b, fmt.Sprintf("  exposure: network\n  listen: 0.0.0.0\n  token_file: %s\n  token_env: EXECUTOR_AUTH_TOKEN\n  env_file: %s\n", keyFile, env))
	appendConfig(t, b, "health:\n  token_file: "+keyFile+"\n")
	s := startSupervise(t, b, socket, dir, "env", "HBX_SUPERVISOR_HEALTH_WAIT=3s")
	st := waitExecutor(t, s, 90*time.Second, "RUNNING", func(st supervisor.Status) bool {
		if st.State == supervisor.Fatal {
			t.Fatalf("executor = %s %q, want RUNNING", st.State, st.Detail)
		}
		return st.State == supervisor.Running
	})
	pid := st.PID

	// Reachable from the network, gated by the box's key.
	url := fmt.Sprintf("http://%s/mcp", net.JoinHostPort(addrs[0], strconv.Itoa(b.port)))
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST %s without a key = %s, want 401", url, resp.Status)
	}
	h := &healthBox{box: b, key: key}
	rep, r := h.health("")
	h.expect("exposed, gated", rep, r, nil, nil)
	if got := rep.check("listeners").Reason; !strings.Contains(got, fmt.Sprintf("listen on 0.0.0.0:%d only", b.port)) {
		t.Errorf("listeners reason %q, want it to name 0.0.0.0:%d", got, b.port)
	}
	// The Docker healthcheck's command: every line a pass, quickly.
	probe := []string{"health", "--only", "api-health,mcp-auth,supervisor,release"}
	if r := h.run("", probe...); r.code != 0 || strings.Count(r.stdout, "\npass ") != 3 || !strings.HasPrefix(r.stdout, "pass ") || r.took > 5*time.Second {
		t.Errorf("hbx %s = %d in %s, stdout %q stderr %q; want 4 passes within 5s", strings.Join(probe, " "), r.code, r.took, r.stdout, r.stderr)
	} else {
		t.Logf("healthcheck command took %s", r.took)
	}
	if _, err := os.Stat(filepath.Join(b.dataDir, "api-key")); err == nil {
		t.Errorf("the test image minted its own key although hbx handed it one")
	}

	// The gate opens while it runs: wedged, restarted, and the new one
	// is never RUNNING while it stays open.
	writeFile(t, open, "", 0o600)
	expectGateOpen(t, h)
	if r := h.run("", probe...); r.code != 1 || len(errorLines(t, r.stderr)) != 1 || !strings.Contains(r.stdout, "fail  mcp-auth") {
		t.Errorf("hbx %s with the gate open = %d, stdout %q stderr %q; want exit 1, mcp-auth failed, one error line", strings.Join(probe, " "), r.code, r.stdout, r.stderr)
	}
	waitExecutor(t, s, 60*time.Second, "a new process after the wedge restart", func(st supervisor.Status) bool {
		return st.PID != 0 && st.PID != pid
	})
	st = waitExecutor(t, s, 60*time.Second, "a failed start naming the bearer gate", func(st supervisor.Status) bool {
		if st.State == supervisor.Running {
			t.Fatalf("an executor with an open /mcp became RUNNING: %+v", st)
		}
		return st.State == supervisor.Backoff && strings.Contains(st.Detail, "bearer gate")
	})
	t.Logf("gate open: %s %q", st.State, st.Detail)
	if err := os.Remove(open); err != nil {
		t.Fatal(err)
	}
	st = waitExecutor(t, s, 60*time.Second, "RUNNING once the gate is closed", func(st supervisor.Status) bool {
		return st.State == supervisor.Running
	})
	pid = st.PID

	// A second listener off loopback (on the machine's address): never
	// RUNNING, listeners fails. (Loopback side ports of its own tree are
	// part of the payload: TestTreeShapeE2E.)
	writeFile(t, env, fmt.Sprintf("HBXTEST_EXTRA_LISTEN=%s:%d\n", addrs[0], freePort(t)), 0o600)
	// hbx restart waits for the start's outcome: FATAL after the retries.
	if r := b.hbx("restart", "executor"); r.code == 0 || !strings.Contains(r.stdout+r.stderr, "listener off the configured address") {
		t.Errorf("hbx restart executor with a stray listener = %d, output %q; want a failure naming it", r.code, r.stdout+r.stderr)
	}
	st = waitExecutor(t, s, 60*time.Second, "a failed start naming the stray listener", func(st supervisor.Status) bool {
		if st.State == supervisor.Running && st.PID != pid {
			t.Fatalf("an executor with a second listener became RUNNING: %+v", st)
		}
		return (st.State == supervisor.Backoff || st.State == supervisor.Fatal) && strings.Contains(st.Detail, "listener off the configured address")
	})
	t.Logf("stray listener: %s %q", st.State, st.Detail)

	// Without a supervisor (hbx run executor), check listeners finds it
	// through the pidfile and fails.
	if r := b.hbx("shutdown"); r.code != 0 {
		t.Fatalf("hbx shutdown = %d\n%s", r.code, r.stderr)
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("hbx supervise did not exit after hbx shutdown")
	}
	stop := runExecutor(t, b)
	rep, r = h.health("", "--only", "listeners")
	h.expect("stray listener", rep, r, []string{"listeners"}, map[string]string{"listeners": "listener off the configured address"})
	stop()

	if log := readFile(t, s.log); strings.Contains(log, key) {
		t.Errorf("the supervisor's log shows the key")
	}
}

// TestSmokeCommandExposedE2E: with executor.exposure network, the scratch
// instance of install.smoke_command still listens on loopback only, and
// gets the box's key as the payload does.
func TestSmokeCommandExposedE2E(t *testing.T) {
	requireE2E(t)
	reg, _, ref := pushed(t)
	smoke := `[bun, -e, "const got = [process.env.EXECUTOR_HOST, process.env.EXECUTOR_AUTH_TOKEN === process.env.HBXTEST_KEY].join(' '); if (got !== '127.0.0.1 true') { console.error('got ' + got); process.exit(4) }"]`
	b := newBox(t, reg, ref, nil, "install:\n  smoke_command: "+smoke+"\n")
	key := strings.Repeat("c3", 32)
	keyFile := filepath.Join(b.dir, "box.key")
	writeFile(t, keyFile, key+"\n", 0o600)
	env := filepath.Join(b.dir, "executor.env")
	writeFile(t, env, "HBXTEST_KEY="+key+"\n", 0o600)
	setExecutorKeys(t, b, fmt.Sprintf("  exposure: network\n  listen: 0.0.0.0\n  token_file: %s\n  token_env: EXECUTOR_AUTH_TOKEN\n  env_file: %s\n", keyFile, env))
	appendConfig(t, b, "health:\n  token_file: "+keyFile+"\n")
	if r := b.hbx("install"); r.code != 0 || strings.Contains(r.stdout+r.stderr, key) {
		t.Fatalf("hbx install with an exposed executor's smoke command = %d (or it printed the key)\n%s", r.code, r.stderr)
	}
}

// TestNetworkExposureAnyKeyE2E: exposed to the network, an Executor whose
// bearer gate refuses a request without a key but lets any made-up key
// through is as open as none: never RUNNING (the start fails naming the
// gate) and check mcp-auth fails.
func TestNetworkExposureAnyKeyE2E(t *testing.T) {
	requireE2E(t)
	b := installedBox(t)
	socket, dir := supervisorConfig(t, b, "")
	key := strings.Repeat("5a", 32)
	keyFile := filepath.Join(b.dir, "box.key")
	writeFile(t, keyFile, key+"\n", 0o600)
	env := filepath.Join(b.dir, "executor.env")
	anyKey := filepath.Join(b.dir, "any-key") // the test image takes any Bearer key while it exists
	writeFile(t, anyKey, "", 0o600)
	writeFile(t, env, "HBXTEST_ANY_KEY_IF="+anyKey+"\n", 0o600)
	setExecutorKeys(t, b, fmt.Sprintf("  exposure: network\n  listen: 0.0.0.0\n  token_file: %s\n  token_env: EXECUTOR_AUTH_TOKEN\n  env_file: %s\n", keyFile, env))
	appendConfig(t, b, "health:\n  token_file: "+keyFile+"\n")
	s := startSupervise(t, b, socket, dir, "env", "HBX_SUPERVISOR_HEALTH_WAIT=3s")
	st := waitExecutor(t, s, 90*time.Second, "a failed start naming the bearer gate", func(st supervisor.Status) bool {
		if st.State == supervisor.Running {
			t.Fatalf("an executor that takes any key became RUNNING: %+v", st)
		}
		return (st.State == supervisor.Backoff || st.State == supervisor.Fatal) && strings.Contains(st.Detail, "the bearer gate takes any key")
	})
	t.Logf("any key: %s %q", st.State, st.Detail)
	// hbx health, between restarts: poll until it reaches a process up.
	h := &healthBox{box: b, key: key}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rep, r := h.health("", "--only", "mcp-auth")
		c := rep.check("mcp-auth")
		if c.Status == "fail" && strings.Contains(c.Reason, "the bearer gate takes any key") && r.code == 1 {
			break
		}
		if c.Status == "pass" || time.Now().After(deadline) {
			t.Fatalf("hbx health --only mcp-auth = %d, %s %q; want a failure naming the bearer gate", r.code, c.Status, c.Reason)
		}
	}

	// The gate closed: RUNNING, mcp-auth passes.
	if err := os.Remove(anyKey); err != nil {
		t.Fatal(err)
	}
	waitExecutor(t, s, 90*time.Second, "RUNNING once the gate checks the key", func(st supervisor.Status) bool {
		return st.State == supervisor.Running
	})
	rep, r := h.health("", "--only", "mcp-auth")
	h.expect("gate closed", rep, r, []string{"mcp-auth"}, nil)
}

// TestNetworkExposureSupervisorKilledE2E: SIGKILL of hbx supervise while
// Executor is exposed on 0.0.0.0 leaves no orphan listening there: the
// port closes on every address within seconds.
func TestNetworkExposureSupervisorKilledE2E(t *testing.T) {
	requireE2E(t)
	addrs := nonLoopbackAddrs()
	if len(addrs) == 0 {
		t.Fatal("this machine has no non-loopback IPv4 address to reach a network-exposed Executor on")
	}
	b := installedBox(t)
	socket, dir := supervisorConfig(t, b, "")
	keyFile := filepath.Join(b.dir, "box.key")
	writeFile(t, keyFile, strings.Repeat("5a", 32)+"\n", 0o600)
	setExecutorKeys(t, b, fmt.Sprintf("  exposure: network\n  listen: 0.0.0.0\n  token_file: %s\n  token_env: EXECUTOR_AUTH_TOKEN\n", keyFile))
	appendConfig(t, b, "health:\n  token_file: "+keyFile+"\n")
	s := startSupervise(t, b, socket, dir)
	st := waitExecutor(t, s, 90*time.Second, "RUNNING", func(st supervisor.Status) bool { return st.State == supervisor.Running })
	addr := net.JoinHostPort(addrs[0], strconv.Itoa(b.port))
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
		t.Fatalf("dial %s while RUNNING: %v", addr, err)
	} else {
		c.Close()
	}
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.exited
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("%s still accepts connections 30s after hbx supervise was killed (executor pid %d orphaned)", addr, st.PID)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", st.PID))
		_, rest, _ := strings.Cut(string(stat), ") ")
		if err != nil || strings.HasPrefix(rest, "Z") { // gone, or dead and not yet reaped
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("executor pid %d outlived its killed supervisor: %s", st.PID, stat)
		}
	}
}

// expectGateOpen checks that hbx health fails mcp-auth wanting a 401 once
// Executor's /mcp answers without a key. The supervisor's own checks see
// the open gate too and restart Executor within a second (and stop each
// new one, never RUNNING, within its health wait), so on a busy machine
// hbx health may find no Executor listening: it asks again, for up to a
// minute, until one answers, and checks that report.
func expectGateOpen(t *testing.T, h *healthBox) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		rep, r := h.health("", "--only", "mcp-auth")
		if strings.Contains(rep.check("mcp-auth").Reason, "want 401") || time.Now().After(deadline) {
			h.expect("gate open", rep, r, []string{"mcp-auth"}, map[string]string{"mcp-auth": "want 401"})
			return
		}
		t.Logf("gate open: no Executor answered yet (%s); asking again", rep.check("mcp-auth").Reason)
		time.Sleep(200 * time.Millisecond)
	}
}
