package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/procscan"
	"github.com/hermesbox/hbx/supervisor"
)

// Health that means healthy (issue 13 §3), on the real test image under
// the real supervisor.

// waitExecutor polls the supervisor until the executor's status satisfies
// ok, and returns it; it fails the test after timeout.
func waitExecutor(t *testing.T, s *supervised, timeout time.Duration, what string, ok func(supervisor.Status) bool) supervisor.Status {
	t.Helper()
	c := s.client()
	deadline := time.Now().Add(timeout)
	var last supervisor.Status
	for {
		sts, err := c.Status(t.Context())
		if err == nil {
			last = statusOf(sts, "executor")
			if ok(last) {
				return last
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("executor = %s pid %d %q after %s (%v), want %s", last.State, last.PID, last.Detail, timeout, err, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDegradedHealthE2E: Executor answers 200 {"status":"degraded"} when
// its database fails. hbx health fails api-health naming the status, the
// supervisor's wedge detection restarts the running executor, and its
// readiness gate keeps the new one STARTING until the status is "ok".
func TestDegradedHealthE2E(t *testing.T) {
	requireE2E(t)
	b := installedBox(t)
	socket, dir := supervisorConfig(t, b, "")
	flag := filepath.Join(b.dir, "degraded") // the test image answers degraded while it exists
	env := filepath.Join(b.dir, "executor.env")
	writeFile(t, env, "HBXTEST_DEGRADED_IF="+flag+"\n", 0o600)
	s := startSupervise(t, b, socket, dir, "env", "HBX_EXECUTOR_ENV_FILE="+env, "HBX_SUPERVISOR_HEALTH_WAIT=3s")
	first := s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	pid := statusOf(first, "executor").PID
	h := &healthBox{box: b}
	rep, r := h.health("", "--only", "api-health")
	h.expect("ok", rep, r, []string{"api-health"}, nil)

	writeFile(t, flag, "", 0o600)
	rep, r = h.health("", "--only", "api-health")
	h.expect("degraded", rep, r, []string{"api-health"}, map[string]string{"api-health": `200 but status "degraded", want "ok"`})

	// Wedge detection: the running executor is restarted.
	waitExecutor(t, s, 60*time.Second, "a new process after the wedge restart", func(st supervisor.Status) bool {
		return st.PID != 0 && st.PID != pid
	})
	// Readiness: the new one does not become RUNNING while it stays
	// degraded; its start fails, and the supervisor says why.
	st := waitExecutor(t, s, 30*time.Second, "a failed start naming the degraded status", func(st supervisor.Status) bool {
		if st.State == supervisor.Running {
			t.Fatalf("a degraded executor became RUNNING: %+v", st)
		}
		return st.State == supervisor.Backoff && strings.Contains(st.Detail, `status "degraded"`)
	})
	t.Logf("while degraded: %s %q", st.State, st.Detail)
	if log := readFile(t, s.log); !strings.Contains(log, "program wedged") || !strings.Contains(log, "degraded") {
		t.Errorf("the supervisor's log does not name the wedge and the degraded status:\n%s", log)
	}

	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	st = waitExecutor(t, s, 60*time.Second, "RUNNING once the status is ok", func(st supervisor.Status) bool {
		return st.State == supervisor.Running
	})
	if st.PID == pid {
		t.Errorf("executor pid %d = the first one: it was never restarted", st.PID)
	}
}

// TestReadinessKeyE2E: a payload that answers 401 on every path without
// its key (the Executor CLI edition) becomes RUNNING with
// health.token_file set and no other setting, passes every check of hbx
// health, and stays supervised: stopped with SIGSTOP, it is found wedged
// and restarted.
func TestReadinessKeyE2E(t *testing.T) {
	requireE2E(t)
	b := installedBox(t)
	socket, dir := supervisorConfig(t, b, "")
	keyFile := filepath.Join(b.dataDir, "api-key") // the test image writes it, mode 0600
	appendConfig(t, b, "health:\n  token_file: "+keyFile+"\n")
	env := filepath.Join(b.dir, "executor.env")
	writeFile(t, env, "HBXTEST_REQUIRE_KEY=1\n", 0o600)
	s := startSupervise(t, b, socket, dir, "env", "HBX_EXECUTOR_ENV_FILE="+env)
	st := waitExecutor(t, s, 90*time.Second, "RUNNING", func(st supervisor.Status) bool {
		if st.State == supervisor.Fatal || st.State == supervisor.Backoff {
			t.Fatalf("executor = %s %q, want it to become RUNNING", st.State, st.Detail)
		}
		return st.State == supervisor.Running
	})
	pid := st.PID
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/health", b.port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /api/health without the key = %s, want 401: the variant is not the CLI edition's shape", resp.Status)
	}
	h := &healthBox{box: b, key: strings.TrimSpace(readFile(t, keyFile))}
	rep, r := h.health("")
	h.expect("every check with the key", rep, r, nil, nil)

	// Wedged: the whole process group stopped. Detected, killed, started
	// again, RUNNING again.
	leader, err := procscan.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leader.Signal(syscall.SIGCONT) }) // by identity: the group is long gone if the test passed
	st = waitExecutor(t, s, 90*time.Second, "RUNNING again as a new process", func(st supervisor.Status) bool {
		return st.State == supervisor.Running && st.PID != pid
	})
	if !processGone(pid) {
		t.Errorf("the wedged executor pid %d is still there", pid)
	}
	if log := readFile(t, s.log); !strings.Contains(log, "program wedged") {
		t.Errorf("the supervisor's log does not say the executor was wedged:\n%s", log)
	}
	t.Logf("wedged pid %d replaced by pid %d", pid, st.PID)
}
