package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv/testcgroup"

	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/supervisor"
)

// programsBox is a box with no Executor (no image, no registry): only the
// given shell programs under a real `hbx supervise`.
func programsBox(t *testing.T, programs string) (*box, *supervised) {
	t.Helper()
	testcgroup.RemoveNewCgroups(t) // after the box's own cleanups
	dir := t.TempDir()
	b := &box{t: t, dir: dir, runtimeDir: filepath.Join(dir, "runtime"), dataDir: filepath.Join(dir, "data"),
		stateDir: filepath.Join(dir, "state"), config: filepath.Join(dir, "hbx.yaml")}
	cfg := fmt.Sprintf("executor:\n  user: root\n  runtime_dir: %s\n  data_dir: %s\n  state_dir: %s\n", b.runtimeDir, b.dataDir, b.stateDir)
	if err := os.WriteFile(b.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	socket, rec := supervisorConfig(t, b, "  executor:\n    enabled: false\n"+programs)
	s := startSupervise(t, b, socket, rec)
	s.client()
	return b, s
}

// hbxEnv runs the binary with env added to the clean environment and no
// --config: the config comes from HBX_CONFIG.
func (b *box) hbxEnv(env []string, args ...string) result {
	b.t.Helper()
	for _, e := range env {
		if strings.HasPrefix(e, killpoint.Env+"=") || strings.HasPrefix(e, killpoint.HoldEnv+"=") {
			requireKillPoints(b.t)
		}
	}
	cmd := exec.Command(binary(b.t), args...)
	cmd.Env = append(cleanEnv(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		b.t.Fatalf("run hbx: %v", err)
	}
	return r
}

// TestStatusExitCode runs `hbx status` against a real supervisor whose
// programs run, fail for good (FATAL), keep failing (BACKOFF) and are
// stopped: it exits 0 only when every program it shows is RUNNING, 3
// otherwise, naming them on stderr.
func TestStatusExitCode(t *testing.T) {
	requireE2E(t)
	b, s := programsBox(t, `  up:
    command: sleep 600
  fatal:
    command: /bin/false
    startretries: 0
  flap:
    command: sh -c 'exit 7'
    startretries: 1000
`)
	s.waitStates(60*time.Second, map[string]supervisor.State{"up": supervisor.Running, "fatal": supervisor.Fatal})
	env := []string{"HBX_CONFIG=" + b.config}

	r := b.hbxEnv(env, "status")
	if r.code != 3 || !strings.Contains(r.stderr, "not running: ") || !strings.Contains(r.stderr, "fatal (FATAL)") ||
		!strings.Contains(r.stdout, "up") || !strings.Contains(r.stdout, "FATAL") {
		t.Errorf("hbx status = %d\nstdout:\n%s\nstderr:\n%s\nwant 3, every program listed, fatal named on stderr", r.code, r.stdout, r.stderr)
	}
	if r := b.hbxEnv(env, "status", "up"); r.code != 0 || withoutSubreaperNote(r.stderr) != "" {
		t.Errorf("hbx status up = %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	if r := b.hbxEnv(env, "status", "--json", "fatal", "up"); r.code != 3 || !json.Valid([]byte(r.stdout)) {
		t.Errorf("hbx status --json fatal up = %d\n%s; want 3 and the JSON list", r.code, r.stdout)
	}
	if r := b.hbxEnv(env, "status", "nosuch"); r.code != 2 || !strings.Contains(r.stderr, `no such program: "nosuch" (programs: `) {
		t.Errorf("hbx status nosuch = %d, %q; want 2 listing the programs", r.code, r.stderr)
	}
	if r := b.hbxEnv(env, "status", "upp"); r.code != 2 || !strings.Contains(r.stderr, `did you mean "up"?`) {
		t.Errorf("hbx status upp = %d, %q; want 2 suggesting up", r.code, r.stderr)
	}

	// flap keeps failing: STARTING and BACKOFF in turn. Every answer is 3;
	// catch it in BACKOFF at least once.
	deadline := time.Now().Add(60 * time.Second)
	for seen := false; !seen; {
		r := b.hbxEnv(env, "status", "--json", "flap")
		var sts []supervisor.Status
		if err := json.Unmarshal([]byte(r.stdout), &sts); err != nil || len(sts) != 1 {
			t.Fatalf("hbx status --json flap = %d, %q: %v", r.code, r.stdout, err)
		}
		if r.code != 3 {
			t.Fatalf("hbx status flap in %s = %d, want 3", sts[0].State, r.code)
		}
		seen = sts[0].State == supervisor.Backoff
		if time.Now().After(deadline) {
			t.Fatalf("flap never seen in BACKOFF; last %s", sts[0].State)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Stopped on request is not running either.
	if r := b.hbxEnv(env, "stop", "up", "flap"); r.code != 0 {
		t.Fatalf("hbx stop up flap = %d\n%s", r.code, r.stderr)
	}
	if r := b.hbxEnv(env, "status", "up"); r.code != 3 || !strings.Contains(r.stderr, "up (STOPPED)") {
		t.Errorf("hbx status up after stop = %d, stderr %q; want 3 naming up (STOPPED)", r.code, r.stderr)
	}
	if r := b.hbxEnv(env, "start", "up"); r.code != 0 {
		t.Fatalf("hbx start up = %d\n%s", r.code, r.stderr)
	}
	if r := b.hbxEnv(env, "status", "up"); r.code != 0 {
		t.Errorf("hbx status up after start = %d, want 0\n%s", r.code, r.stderr)
	}
}

// TestNoSupervisorNamesConfig: with the supervisor gone, a control command
// says which config file it read (from HBX_CONFIG here) and which socket.
func TestNoSupervisorNamesConfig(t *testing.T) {
	requireE2E(t)
	b, s := programsBox(t, "  up:\n    command: sleep 600\n")
	env := []string{"HBX_CONFIG=" + b.config}
	if r := b.hbxEnv(env, "shutdown"); r.code != 0 {
		t.Fatalf("hbx shutdown = %d\n%s", r.code, r.stderr)
	}
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("hbx supervise did not exit after hbx shutdown")
	}
	r := b.hbxEnv(env, "status")
	want := "[socket " + s.socket + ": file " + b.config + "; config file " + b.config + " (from env HBX_CONFIG)]"
	if r.code != 1 || !strings.Contains(r.stderr, "no supervisor is running") || !strings.Contains(r.stderr, want) {
		t.Errorf("hbx status without a supervisor = %d, %q; want 1 containing %q", r.code, r.stderr, want)
	}
}

// TestProgramNameHints: every command that takes program names (status,
// start, stop, restart, logs) answers a mistyped name with the running
// supervisor's programs and a "did you mean", and a disabled program's
// name by saying it is disabled; all exit 2 and change nothing.
func TestProgramNameHints(t *testing.T) {
	requireE2E(t)
	b, s := programsBox(t, "  worker:\n    command: sleep 600\n")
	s.waitStates(60*time.Second, map[string]supervisor.State{"worker": supervisor.Running})
	env := []string{"HBX_CONFIG=" + b.config}
	for _, cmd := range [][]string{{"status"}, {"start"}, {"stop"}, {"restart"}, {"logs"}} {
		r := b.hbxEnv(env, append(cmd, "wroker")...)
		if r.code != 2 || !strings.Contains(r.stderr, `no such program: "wroker" (programs: worker; did you mean "worker"?)`) {
			t.Errorf("hbx %s wroker = %d, %q; want 2 suggesting worker", cmd[0], r.code, r.stderr)
		}
		r = b.hbxEnv(env, append(cmd, "hermes")...)
		if r.code != 2 || !strings.Contains(r.stderr, `program "hermes" is disabled (programs.hermes.enabled: false)`) {
			t.Errorf("hbx %s hermes = %d, %q; want 2 saying hermes is disabled", cmd[0], r.code, r.stderr)
		}
	}
	// Nothing was stopped by the refused commands.
	if r := b.hbxEnv(env, "status", "worker"); r.code != 0 {
		t.Errorf("hbx status worker after the refused commands = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
