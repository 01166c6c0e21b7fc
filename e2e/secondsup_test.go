package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

// killAtEvent runs `hbx ARGS --json` and kills it with SIGKILL at the
// first JSON line whose event is at. It fails the test when the command
// ends before.
func killAtEvent(t *testing.T, b *box, at string, args ...string) {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"--config", b.config}, append(args, "--json")...)...)
	cmd.Env = cleanEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	killed := false
	var events []string
	for sc.Scan() {
		var ev struct{ Event string }
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			events = append(events, ev.Event)
		}
		if ev.Event == at {
			cmd.Process.Signal(syscall.SIGKILL)
			killed = true
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	err = cmd.Wait()
	if !killed {
		t.Fatalf("hbx %v ended (%v) before the event %q; events %v; stderr:\n%s", args, err, at, events, stderr.String())
	}
}

// boxState is what a second supervisor must not change: the upgrade
// journal, the active release, the config file and the data directory's
// entries.
func boxState(t *testing.T, b *box) map[string]string {
	t.Helper()
	st := map[string]string{"current": b.current(), "config": readFile(t, b.config)}
	j, _ := os.ReadFile(filepath.Join(b.runtimeDir, "upgrade.json"))
	st["upgrade.json"] = string(j)
	ents, _ := os.ReadDir(b.dataDir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	st["data"] = strings.Join(names, " ")
	parent, _ := os.ReadDir(filepath.Dir(b.dataDir))
	names = nil
	for _, e := range parent {
		names = append(names, e.Name())
	}
	st["data parent"] = strings.Join(names, " ")
	s, _ := os.ReadFile(filepath.Join(b.dataDir, "state.json"))
	st["state.json"] = string(s)
	return st
}

// TestSecondSuperviseChangesNothingE2E: with a supervisor running and the
// journal of an interrupted upgrade present (hbx upgrade killed in its
// health wait), a second hbx supervise exits 1 with "another supervisor is
// running" and changes nothing: no recovery through the running
// supervisor. The running one is stopped (SIGSTOP) meanwhile, so that only
// the second one could change anything.
func TestSecondSuperviseChangesNothingE2E(t *testing.T) {
	requireE2E(t)
	defer holdRecovery(t)() // the running one does not resolve it either
	b, s, _, v2, _ := upgradeBox(t)
	killAtEvent(t, b, "health", "upgrade", "--image", v2)
	// The new release's executor starts (and migrates the data) on its
	// own, the supervisor stopped or not: let it settle first, or its
	// start is taken for a change of the second supervisor.
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	healthyAt(t, b.port, 60*time.Second)
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer s.cmd.Process.Signal(syscall.SIGCONT)
	j, err := upgrade.ReadJournal(b.runtimeDir)
	if err != nil || j == nil || j.Phase != upgrade.PhaseActivating {
		t.Fatalf("journal after the kill: %+v, %v; want phase activating", j, err)
	}
	before := boxState(t, b)

	// The same configuration, and one without the executor program
	// (which then holds no data lock): the supervisor's own lock refuses.
	noExec := filepath.Join(b.dir, "noexec.yaml")
	writeFile(t, noExec, strings.Replace(readFile(t, b.config), "  hermes:\n    enabled: false\n", "  hermes:\n    enabled: false\n  executor:\n    enabled: false\n", 1), 0o600)
	for _, config := range []string{b.config, noExec} {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		cmd := exec.CommandContext(ctx, binary(t), "--config", config, "supervise")
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		var ee *exec.ExitError
		if timedOut || !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("second hbx supervise --config %s = %v, want exit 1\n%s", filepath.Base(config), err, out)
		}
		if msg := lastLine(string(out)); !strings.Contains(msg, "another supervisor is running") {
			t.Errorf("second hbx supervise --config %s said %q, want \"another supervisor is running\"", filepath.Base(config), msg)
		}
		if strings.Contains(string(out), "recovered") || strings.Contains(string(out), "rolling") {
			t.Errorf("second hbx supervise --config %s recovered something:\n%s", filepath.Base(config), out)
		}
		after := boxState(t, b)
		for k, v := range before {
			if after[k] != v {
				t.Errorf("%s changed by the second hbx supervise --config %s:\nbefore %q\nafter  %q", k, filepath.Base(config), v, after[k])
			}
		}
	}
	// Once the running one is gone, the next hbx supervise (having
	// claimed the supervisor's lock itself) still recovers.
	s.cmd.Process.Signal(syscall.SIGCONT)
	restart(t, b, s)
	if j, err := upgrade.ReadJournal(b.runtimeDir); err != nil || j == nil || j.Phase != upgrade.PhaseRolledBack {
		t.Errorf("journal after the next hbx supervise: %+v, %v; want the upgrade rolled back", j, err)
	}
}

// TestNotInstalledNamesInterruptedUpgradeE2E: where the executor cannot
// start because the active release is not the configured one while an
// upgrade is half done (hbx upgrade killed in its health wait, the pin
// then disagreeing with the active release), the reason names the
// interrupted upgrade and hbx rollback, never "run `hbx install` first":
// in hbx run executor's error and in hbx restart executor's refusal; and
// hbx install refuses, exit 1, nothing changed.
func TestNotInstalledNamesInterruptedUpgradeE2E(t *testing.T) {
	requireE2E(t)
	defer holdRecovery(t)() // the running supervisor leaves it half done
	b, s, v1, v2, _ := upgradeBox(t)
	killAtEvent(t, b, "health", "upgrade", "--image", v2)
	if j, err := upgrade.ReadJournal(b.runtimeDir); err != nil || j == nil || j.Phase != upgrade.PhaseActivating {
		t.Fatalf("journal after the kill: %+v, %v; want phase activating", j, err)
	}
	// The start the upgrade asked for before its health wait goes on
	// without it (STARTING, its pid not yet known on a busy machine):
	// let it settle, so that "untouched" below compares like with like.
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	// The pin back on v1 while v2 is active: what a kill between the
	// pin and the runtime switch leaves.
	plat := platform(t)
	if err := config.WritePin(b.config, v1, plat, testImage(t).Manifests[plat].String()); err != nil {
		t.Fatal(err)
	}
	check := func(what, msg string) {
		t.Helper()
		if strings.Contains(msg, "hbx install` first") {
			t.Errorf("%s says %q, want no \"run `hbx install` first\" while an upgrade is half done", what, msg)
		}
		for _, w := range []string{"an upgrade is half done", "from " + v1 + " to " + v2, "interrupted in phase activating", "`hbx rollback`", "`hbx supervise`"} {
			if !strings.Contains(msg, w) {
				t.Errorf("%s says %q, want it to say %q", what, msg, w)
			}
		}
	}
	// The running supervisor: a restart of the executor is refused
	// before anything is stopped (Program.Check), with that reason.
	before := executorStatus(t, s)
	r := b.hbx("restart", "executor")
	t.Logf("hbx restart executor = %d: %s", r.code, strings.TrimSpace(r.stderr))
	if r.code != 1 || !strings.Contains(r.stderr, "nothing stopped") {
		t.Errorf("hbx restart executor = %d, %q; want 1 and \"nothing stopped\"", r.code, lastLine(r.stderr))
	}
	check("hbx restart executor", lastLine(r.stderr))
	if after := executorStatus(t, s); after.PID != before.PID || after.State != before.State {
		t.Errorf("executor %s pid %d after the refused restart, %s pid %d before: want it untouched", after.State, after.PID, before.State, before.PID)
	}

	// hbx install refuses too, before anything: the release the
	// recovery needs stays, nothing on disk changes.
	rels, err := os.ReadDir(filepath.Join(b.runtimeDir, "releases"))
	if err != nil {
		t.Fatal(err)
	}
	r = b.hbx("install")
	t.Logf("hbx install = %d: %s", r.code, lastLine(r.stderr))
	for _, w := range []string{"install: an upgrade is half done: ", "from " + v1 + " to " + v2, "`hbx rollback`", "`hbx supervise`", "nothing changed"} {
		if r.code != 1 || !strings.Contains(lastLine(r.stderr), w) {
			t.Errorf("hbx install = %d, %q; want 1 saying %q", r.code, lastLine(r.stderr), w)
		}
	}
	if after, err := os.ReadDir(filepath.Join(b.runtimeDir, "releases")); err != nil || len(after) != len(rels) {
		t.Errorf("releases/ after the refused install: %d entries, %v; want the %d before", len(after), err, len(rels))
	}
	if j, err := upgrade.ReadJournal(b.runtimeDir); err != nil || j == nil || j.Phase != upgrade.PhaseActivating {
		t.Errorf("journal after the refused install: %+v, %v; want it untouched, phase activating", j, err)
	}

	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
	r = b.hbx("run", "executor")
	if r.code == 0 {
		t.Fatalf("hbx run executor = 0, want a refusal")
	}
	t.Logf("hbx run executor: %s", lastLine(r.stderr))
	check("hbx run executor", lastLine(r.stderr))
}
