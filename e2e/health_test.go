package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/internal/testimage"
	"github.com/hermesbox/hbx/supervisor"
)

// hbx health on a box running the real test image: healthy, then each
// acceptance condition broken for real, one at a time.

// healthReport is the JSON document of `hbx health --json`.
type healthReport struct {
	Status string        `json:"status"`
	Checks []healthCheck `json:"checks"`
}

// healthCheck is one check of a healthReport.
type healthCheck struct {
	Name       string `json:"name"`
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	DurationMS *int64 `json:"duration_ms"`
}

// check returns the named check of the report (zero when absent).
func (r healthReport) check(name string) healthCheck {
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	return healthCheck{}
}

var allChecks = []string{"api-health", "web-ui", "mcp-auth", "mcp-tools", "supervisor", "release", "listeners", "data-dir"}

// healthBox is a box with the key file of its executor, whose content no
// output of hbx may ever show.
type healthBox struct {
	*box
	key string // the real key, once the executor wrote it
}

// run runs hbx with stdin and the box's config, and fails the test if the
// key shows in its output.
func (h *healthBox) run(stdin string, args ...string) result {
	h.t.Helper()
	cmd := exec.Command(binary(h.t), append([]string{"--config", h.config}, args...)...)
	cmd.Env = cleanEnv()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		h.t.Fatalf("run hbx: %v", err)
	}
	if h.key != "" && strings.Contains(r.stdout+r.stderr, h.key) {
		h.t.Errorf("hbx %q printed the MCP key:\n%s%s", args, r.stdout, r.stderr)
	}
	return r
}

// health runs `hbx health --json args...` and decodes the report.
func (h *healthBox) health(stdin string, args ...string) (healthReport, result) {
	h.t.Helper()
	r := h.run(stdin, append([]string{"health", "--json"}, args...)...)
	var rep healthReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		h.t.Fatalf("hbx health --json %q = %d, stdout %q: %v\nstderr: %s", args, r.code, r.stdout, err, r.stderr)
	}
	return rep, r
}

// expect checks a report: exactly the checks in fails failed, each with a
// reason containing its text; the checks in skips were skipped; all
// others of want (every check when nil) passed; the exit code matches.
func (h *healthBox) expect(what string, rep healthReport, r result, want []string, fails map[string]string, skips ...string) {
	h.t.Helper()
	if want == nil {
		want = allChecks
	}
	var names []string
	for _, c := range rep.Checks {
		names = append(names, c.Name)
		wantStatus := "pass"
		if _, ok := fails[c.Name]; ok {
			wantStatus = "fail"
		} else if slices.Contains(skips, c.Name) {
			wantStatus = "skip"
		}
		if c.Status != wantStatus || !strings.Contains(c.Reason, fails[c.Name]) || c.Reason == "" || c.DurationMS == nil || *c.DurationMS < 0 {
			h.t.Errorf("%s: check %s = %s %q, want %s with a reason containing %q", what, c.Name, c.Status, c.Reason, wantStatus, fails[c.Name])
		}
	}
	if diff := cmp.Diff(names, want); diff != "" {
		h.t.Errorf("%s: checks (-got +want):\n%s", what, diff)
	}
	wantCode, wantStatus := 0, "pass"
	if len(fails) > 0 {
		wantCode, wantStatus = 1, "fail"
	}
	if r.code != wantCode || rep.Status != wantStatus {
		h.t.Errorf("%s: hbx health = %d, status %q; want %d, %q\n%s", what, r.code, rep.Status, wantCode, wantStatus, r.stderr)
	}
	if h.t.Failed() {
		h.t.Logf("%s: report:\n%s", what, r.stdout)
	}
}

// newHealthBox is an installed box of the test image with the Hermes
// gateway stand-in beside Executor in its supervisor's config and
// health.token_file naming the key file the test image writes (mode 0600);
// no supervisor runs yet. It returns the box (its key not read yet), the
// release's image and the supervisor's socket and directory.
func newHealthBox(t *testing.T) (h *healthBox, img *testimage.Image, socket, dir string) {
	t.Helper()
	reg, img, ref := pushed(t)
	plat := platform(t)
	b := newBox(t, reg, ref, map[string]string{plat: img.Manifests[plat].String()}, "")
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install = %d\n%s", r.code, r.stderr)
	}
	socket, dir = supervisorConfig(t, b, gatewayProgram)
	appendConfig(t, b, "health:\n  token_file: "+healthKeyFile(b)+"\n  timeout: 5s\n")
	return &healthBox{box: b}, img, socket, dir
}

// healthKeyFile is the key file the test image writes in the box's data
// directory.
func healthKeyFile(b *box) string { return filepath.Join(b.dataDir, "api-key") }

// startHealthy starts the box's supervisor, waits until both programs
// run and reads the key.
func (h *healthBox) startHealthy(socket, dir string) *supervised {
	h.t.Helper()
	s := startSupervise(h.t, h.box, socket, dir)
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "gateway": supervisor.Running})
	h.key = strings.TrimSpace(readFile(h.t, healthKeyFile(h.box)))
	return s
}

// TestHealthE2E: hbx health on the healthy box under the supervisor,
// every check, the headless browser, then each condition broken for
// real; with the executor stopped; without a supervisor, with hbx run
// executor's pidfile. The arm64 suite runs it (the Makefile's
// E2E_ARM64_TESTS): the checks read the arm64 Bun under qemu-user (its
// listeners, its pid from the supervisor and from the pidfile, its MCP
// tools). TestHealthWaitE2E and TestHealthNonLoopbackListenerE2E hold
// the rest: logic that is the same on every architecture, each restarting
// Bun, 20 to 60 s a start under qemu-user, so they run natively only
// (docs/development.md, "ARM64 under emulation").
func TestHealthE2E(t *testing.T) {
	requireE2E(t)
	h, img, socket, dir := newHealthBox(t)
	b := h.box

	// Healthy under the supervisor: every check passes.
	s := h.startHealthy(socket, dir)
	rep, r := h.health("")
	h.expect("healthy", rep, r, nil, nil)
	rep, r = h.health("", "--deep")
	h.expect("healthy, --deep", rep, r, nil, nil)
	if c := rep.check("release"); !strings.Contains(c.Reason, "re-hashed") || !strings.Contains(c.Reason, "manifest pinned") {
		t.Errorf("release --deep reason = %q, want it to say what it re-hashed and that the manifest is pinned", c.Reason)
	}
	r = h.run("", "health")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != len(allChecks) {
		t.Errorf("hbx health = %d, %d lines, want 0 and one line per check:\n%s%s", r.code, len(lines), r.stdout, r.stderr)
	}
	t.Logf("hbx health on the healthy box, in %s:\n%s", r.took, r.stdout)
	for i, l := range lines {
		if i < len(allChecks) && !regexpMatch(`^pass  `+allChecks[i]+` +\d+ms  \S`, l) {
			t.Errorf("hbx health line %d = %q, want pass %s, a duration and a reason", i, l, allChecks[i])
		}
	}
	rep, r = h.health("", "--only", "listeners,api-health")
	h.expect("--only", rep, r, []string{"api-health", "listeners"}, nil)
	if c := rep.check("listeners"); !strings.Contains(c.Reason, "from the supervisor") || !strings.Contains(c.Reason, fmt.Sprintf("127.0.0.1:%d", b.port)) {
		t.Errorf("listeners reason = %q, want the pid from the supervisor and the port", c.Reason)
	}
	if r := h.run("", "health", "--only", "bogus"); r.code != 2 || !strings.Contains(r.stderr, `no such check: "bogus"`) {
		t.Errorf("hbx health --only bogus = %d, %q; want 2", r.code, r.stderr)
	}

	t.Run("browser", func(t *testing.T) { browserCheck(t, b.port) })

	// The key on standard input instead of a file.
	rep, r = h.health(h.key+"\n", "--token-stdin", "--health-token-file=", "--only", "mcp-tools")
	h.expect("key on stdin", rep, r, []string{"mcp-tools"}, nil)
	rep, r = h.health("", "--health-token-file=", "--only", "mcp-tools")
	h.expect("no key", rep, r, []string{"mcp-tools"}, nil, "mcp-tools")

	// Wrong expected tool sets.
	rep, r = h.health("", "--health-mcp-tools", "execute,resume,debug")
	h.expect("tool missing", rep, r, nil, map[string]string{"mcp-tools": `missing "debug"`})
	rep, r = h.health("", "--health-mcp-tools", "execute")
	h.expect("tool extra", rep, r, nil, map[string]string{"mcp-tools": `unexpected "resume"`})

	// A wrong key.
	wrong := filepath.Join(b.dir, "wrong.key")
	if err := os.WriteFile(wrong, []byte("not-the-key-"+strings.Repeat("0", 52)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, r = h.health("", "--health-token-file", wrong)
	h.expect("wrong key", rep, r, nil, map[string]string{"mcp-tools": "the server refused the key (401 Unauthorized)"})
	if strings.Contains(r.stdout+r.stderr, "not-the-key-") {
		t.Errorf("hbx health printed the wrong key:\n%s", r.stdout)
	}
	if err := os.Chmod(wrong, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, r = h.health("", "--health-token-file", wrong, "--only", "mcp-tools")
	h.expect("world-readable key file", rep, r, []string{"mcp-tools"}, map[string]string{"mcp-tools": "is mode 0644, want 0600 or stricter"})

	// A release whose recorded index digest differs; then a manifest that
	// no longer hashes to its digest (only --deep sees it).
	meta := filepath.Join(b.runtimeDir, "current", "release.json")
	orig := readFile(t, meta)
	other := "sha256:" + strings.Repeat("e", 64)
	var doc map[string]any
	if err := json.Unmarshal([]byte(orig), &doc); err != nil {
		t.Fatal(err)
	}
	doc["index_digest"] = other
	edited, _ := json.Marshal(doc)
	writeFile(t, meta, string(edited), 0o644)
	rep, r = h.health("")
	h.expect("recorded index differs", rep, r, nil, map[string]string{"release": "installed index " + other + ", configured " + img.IndexDigest.String()})
	writeFile(t, meta, orig, 0o644)
	manifest := filepath.Join(b.runtimeDir, "current", "manifest.json")
	origMan := readFile(t, manifest)
	writeFile(t, manifest, origMan+" ", 0o644)
	rep, r = h.health("", "--deep")
	h.expect("manifest tampered, --deep", rep, r, nil, map[string]string{"release": "manifest.json hashes to sha256:"})
	rep, r = h.health("")
	h.expect("manifest tampered, shallow", rep, r, nil, nil)
	writeFile(t, manifest, origMan, 0o644)

	// A data directory that others may read.
	if err := os.Chmod(b.dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	rep, r = h.health("")
	h.expect("data dir 0755", rep, r, nil, map[string]string{"data-dir": "is mode 0755, want 0700 or stricter"})
	if err := os.Chmod(b.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}

	// The service stopped: everything that talks to it fails, and says so.
	if r := b.hbx("stop", "executor"); r.code != 0 {
		t.Fatalf("hbx stop executor = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	rep, r = h.health("")
	h.expect("executor stopped", rep, r, nil, stoppedExecutor)
	r = h.run("", "health")
	t.Logf("hbx health with the executor stopped = %d:\n%s%s", r.code, r.stdout, r.stderr)

	// No supervisor: its check skips, and the listeners check looks for
	// the pidfile of hbx run.
	if r := b.hbx("shutdown"); r.code != 0 {
		t.Fatalf("hbx shutdown = %d\n%s", r.code, r.stderr)
	}
	<-s.exited
	rep, r = h.health("", "--only", "supervisor,listeners")
	h.expect("no supervisor", rep, r, []string{"supervisor", "listeners"}, map[string]string{"listeners": "no supervisor answers and there is no pidfile"}, "supervisor")

	// hbx run executor: healthy, the pid from the pidfile.
	stop := runExecutor(t, b)
	rep, r = h.health("")
	h.expect("hbx run", rep, r, nil, nil, "supervisor")
	if c := rep.check("listeners"); !strings.Contains(c.Reason, "from pidfile") {
		t.Errorf("listeners reason = %q, want the pid from the pidfile", c.Reason)
	}
	stop()
}

// stoppedExecutor are the checks that fail, and what their reasons say,
// with the executor stopped under the supervisor.
var stoppedExecutor = map[string]string{
	"api-health": "connection refused", "web-ui": "connection refused", "mcp-auth": "connection refused",
	"mcp-tools": "connection refused", "supervisor": "executor STOPPED", "listeners": "executor is not running: STOPPED under the supervisor",
}

// TestHealthWaitE2E: with the executor stopped under the supervisor, hbx
// health --wait returns as soon as everything passes again after hbx
// start executor. Native only (see TestHealthE2E).
func TestHealthWaitE2E(t *testing.T) {
	requireE2E(t)
	h, _, socket, dir := newHealthBox(t)
	b := h.box
	h.startHealthy(socket, dir)
	if r := b.hbx("stop", "executor"); r.code != 0 {
		t.Fatalf("hbx stop executor = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	rep, r := h.health("")
	h.expect("executor stopped", rep, r, nil, stoppedExecutor)

	// --wait: returns as soon as everything passes again.
	// Bun's start under qemu-user on a busy machine takes tens of seconds
	// (seen: hbx start waited 61 s for RUNNING), so the wait is scaled.
	wait := slow(t, 60*time.Second)
	waiter := exec.Command(binary(t), "--config", b.config, "health", "--wait", wait.String())
	waiter.Env = cleanEnv()
	var waitOut bytes.Buffer
	waiter.Stdout, waiter.Stderr = &waitOut, &waitOut
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	started := time.Now()
	if r := b.hbx("start", "executor"); r.code != 0 {
		t.Fatalf("hbx start executor = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := waiter.Wait(); err != nil || !strings.Contains(waitOut.String(), "pass  listeners") {
		t.Errorf("hbx health --wait %s = %v\n%s", wait, err, waitOut.String())
	}
	t.Logf("hbx health --wait passed %s after hbx start executor was run", time.Since(started).Round(time.Millisecond))
}

// TestHealthNonLoopbackListenerE2E: the service bound to 0.0.0.0 through
// the test image's own switch (hbx's configuration refuses such an
// address) fails the listeners check under hbx run executor, and the
// supervisor's readiness gate, the same code, never lets it become
// RUNNING. Native only (see TestHealthE2E).
func TestHealthNonLoopbackListenerE2E(t *testing.T) {
	requireE2E(t)
	h, _, socket, dir := newHealthBox(t)
	b := h.box
	force := filepath.Join(b.dir, "force-host.env")
	writeFile(t, force, "HBXTEST_FORCE_HOST=0.0.0.0\n", 0o600)
	stop := runExecutor(t, b, "--executor-env-file", force)
	h.key = strings.TrimSpace(readFile(t, healthKeyFile(b)))
	rep, r := h.health("")
	h.expect("bound to 0.0.0.0", rep, r, nil, map[string]string{"listeners": fmt.Sprintf("listener not on loopback: 0.0.0.0:%d (pid ", b.port)}, "supervisor")
	stop()

	// The supervisor's readiness gate is the same code: such an executor
	// never becomes RUNNING, and the supervisor says why.
	// The health wait must outlast Bun's start: 1.6s under qemu-user on a
	// quiet machine, more than 40s on a busy one (seen: four attempts of
	// 40s each refused before Bun listened, at load average 15). The gate
	// names the listener as soon as Bun listens, so a long wait costs
	// nothing when it passes.
	s := startSupervise(t, b, socket, dir, "env", "HBX_EXECUTOR_ENV_FILE="+force, "HBX_SUPERVISOR_HEALTH_WAIT="+slow(t, 30*time.Second).String())
	c := s.client()
	deadline := time.Now().Add(slow(t, 60*time.Second))
	for {
		sts, err := c.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		ex := statusOf(sts, "executor")
		if ex.State == supervisor.Running {
			t.Fatalf("an executor listening on 0.0.0.0 became RUNNING: %+v", ex)
		}
		if strings.Contains(ex.Detail, fmt.Sprintf("listener not on loopback: 0.0.0.0:%d", b.port)) {
			t.Logf("the readiness gate refused it: %s %s", ex.State, ex.Detail)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("executor = %s %q after %s, want the gate to name the 0.0.0.0 listener", ex.State, ex.Detail, slow(t, 60*time.Second))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// appendConfig appends text to the box's config file.
func appendConfig(t *testing.T, b *box, text string) {
	t.Helper()
	f, err := os.OpenFile(b.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeFile replaces p with s at mode.
func writeFile(t *testing.T, p, s string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// runExecutor starts `hbx [flags] run executor` for the box, waits until
// it answers, and returns a function that stops it (SIGTERM) and waits.
func runExecutor(t *testing.T, b *box, flags ...string) (stop func()) {
	t.Helper()
	cmd := exec.Command(binary(t), append(append([]string{"--config", b.config}, flags...), "run", "executor")...)
	cmd.Env = cleanEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	})
	waitHealthy(t, b.port, 30*time.Second)
	return func() {
		t.Helper()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("hbx run executor after SIGTERM = %v\n%s", err, out.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("hbx run executor did not stop after SIGTERM\n%s", out.String())
		}
	}
}
