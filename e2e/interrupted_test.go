package e2e

import (
	"errors"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

// holdRecovery makes every hbx supervise started after it (the variable
// is inherited through cleanEnv) wait before it resolves an interrupted
// release change, until the returned function is called (or the test
// ends), so a test can look at the state before.
func holdRecovery(t *testing.T) (release func()) {
	t.Helper()
	gate := holdRecoveryFile(t)
	return func() { os.Remove(gate) }
}

// holdRecoveryFile is holdRecovery's file: the hold lasts while it exists.
func holdRecoveryFile(t *testing.T) string {
	t.Helper()
	requireKillPoints(t)
	gate := filepath.Join(t.TempDir(), "hold")
	writeFile(t, gate, "", 0o600)
	t.Setenv(killpoint.HoldEnv, killpoint.SupervisorRecovery+"="+gate)
	return gate
}

// settled reports whether no release change or restore is half done: no
// restore journal, upgrade.json finished, and no live process holds
// hbx.lock.
func settled(b *box) bool {
	if _, err := os.Lstat(b.dataDir + ".restore.json"); err == nil {
		return false
	}
	if j, err := upgrade.ReadJournal(b.runtimeDir); err != nil || j != nil && j.Pending() {
		return false
	}
	h := lock.ReadHolder(filepath.Join(b.runtimeDir, upgrade.LockFile))
	return h.PID == 0 || syscall.Kill(h.PID, 0) != nil
}

// unfinished reports whether a journal records an unfinished change: a
// restore journal in phase staging or swapping, or upgrade.json pending.
func unfinished(b *box) bool {
	if j, err := os.ReadFile(b.dataDir + ".restore.json"); err == nil && !strings.Contains(string(j), `"committed"`) {
		return true
	}
	j, err := upgrade.ReadJournal(b.runtimeDir)
	return err != nil || j != nil && j.Pending()
}

// waitConverged polls until nothing is half done and hbx health passes,
// and returns how long that took; it fails the test after timeout, and
// when hbx health passed while a journal recorded an unfinished change
// from before to after the call (check release must fail then).
func waitConverged(t *testing.T, b *box, what string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last result
	for time.Since(start) < timeout {
		if settled(b) {
			if last = b.hbx("health"); last.code == 0 && settled(b) {
				return time.Since(start)
			}
		} else if unfinished(b) {
			if r := b.hbx("health"); r.code == 0 && unfinished(b) {
				t.Errorf("%s: hbx health passed while a change was unfinished:\n%s", what, r.stdout)
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	j, _ := os.ReadFile(filepath.Join(b.runtimeDir, upgrade.JournalFile))
	t.Fatalf("%s: not converged after %s: hbx health = %d\n%s%s\nupgrade.json: %s", what, timeout, last.code, last.stdout, last.stderr, j)
	return 0
}

// besideData lists the directories beside the data directory that hold
// data (<data_dir>.rolled-back-*, .pre-restore-*, .restore-*).
func besideData(b *box) map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir(filepath.Dir(b.dataDir))
	base := filepath.Base(b.dataDir) + "."
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), base) {
			out[filepath.Join(filepath.Dir(b.dataDir), e.Name())] = true
		}
	}
	return out
}

// TestRunningSupervisorUndoesInterruptedUpgradeE2E: hbx upgrade killed
// with SIGKILL as its health wait starts (HBXTEST_KILL_AT=
// upgrade-health-wait), with the supervisor running (issue 12
// §2: it kept serving the new release on migrated data, healthy, with
// upgrade.json "activating", and the next start moved everything written
// meanwhile aside without a word). While it is unresolved, hbx health
// (check release) and hbx status fail naming the interrupted upgrade and
// hbx rollback; then the running supervisor rolls it back within
// seconds, on its own: the old release on the pre-upgrade data, the data
// written meanwhile kept in <data_dir>.rolled-back-* and named in the
// supervisor's log and in hbx status.
func TestRunningSupervisorUndoesInterruptedUpgradeE2E(t *testing.T) {
	requireE2E(t)
	release := holdRecovery(t)
	defer release()
	b, s, v1, v2, _ := upgradeBox(t)
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v1 data", 0o600)
	if r := b.hbxEnv([]string{"HBX_CONFIG=" + b.config, killpoint.Env + "=" + killpoint.UpgradeHealthWait}, "upgrade", "--image", v2); r.code != -1 {
		t.Fatalf("hbx upgrade with %s=%s = %d, want killed\n%s", killpoint.Env, killpoint.UpgradeHealthWait, r.code, r.stderr)
	}
	if j, err := upgrade.ReadJournal(b.runtimeDir); err != nil || j == nil || j.Phase != upgrade.PhaseActivating {
		t.Fatalf("journal after the kill: %+v, %v; want phase activating", j, err)
	}
	// The new runtime serves and writes meanwhile.
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	healthyAt(t, b.port, 60*time.Second)
	writeFile(t, filepath.Join(b.dataDir, "generation"), "written on v2 after the kill", 0o600)

	want := []string{"upgrade to " + v2 + " interrupted in phase activating", "`hbx rollback`"}
	r := b.hbx("health")
	t.Logf("hbx health while unresolved = %d:\n%s", r.code, r.stdout)
	if r.code == 0 {
		t.Errorf("hbx health = 0 while the upgrade is interrupted, want a failure")
	}
	var releaseLine string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.Contains(l, " release ") {
			releaseLine = l
		}
	}
	if !strings.HasPrefix(releaseLine, "fail") {
		t.Errorf("check release while the upgrade is interrupted: %q, want fail", releaseLine)
	}
	r = b.hbx("status")
	t.Logf("hbx status while unresolved = %d:\n%s%s", r.code, r.stdout, r.stderr)
	if r.code != 3 {
		t.Errorf("hbx status = %d while the upgrade is interrupted, want 3", r.code)
	}
	for _, w := range want {
		if !strings.Contains(releaseLine, w) || !strings.Contains(r.stdout, w) || !strings.Contains(r.stderr, w) {
			t.Errorf("check release %q / hbx status %q%q: want each to say %q", releaseLine, r.stdout, r.stderr, w)
		}
	}

	release()
	took := waitConverged(t, b, "after the kill", 2*time.Minute)
	t.Logf("the running supervisor resolved the interrupted upgrade %s after it was let", took.Round(time.Millisecond))
	if took > time.Minute {
		t.Errorf("resolved after %s, want promptly", took)
	}
	onRelease(t, b, "after the running supervisor resolved it", "1.0.0", v1, "v1 data", 1)
	j, err := upgrade.ReadJournal(b.runtimeDir)
	if err != nil || j == nil || j.Phase != upgrade.PhaseRolledBack || j.KeptAside == "" {
		t.Fatalf("journal: %+v, %v; want rolled back with the data kept aside", j, err)
	}
	if got := readFile(t, filepath.Join(j.KeptAside, "generation")); got != "written on v2 after the kill" {
		t.Errorf("kept aside in %s: generation %q, want what was written after the kill", j.KeptAside, got)
	}
	if log := readFile(t, s.log); !strings.Contains(log, "recovered by the running supervisor") || !strings.Contains(log, j.KeptAside) {
		t.Errorf("the supervisor's log does not say it rolled back and where the data is kept (%s)", j.KeptAside)
	}
	r = b.hbx("status")
	if r.code != 0 || !strings.Contains(r.stdout, "note: the interrupted upgrade to "+v2+" was rolled back") || !strings.Contains(r.stdout, j.KeptAside) {
		t.Errorf("hbx status after the recovery = %d, want 0 and a note naming %s:\n%s%s", r.code, j.KeptAside, r.stdout, r.stderr)
	}
	t.Logf("hbx status after the recovery:\n%s", r.stdout)
}

// killTrials is the number of random kills of each loop: HBXTEST_KILLS,
// 20 by default. A loop runs until that many trials were killed (a
// command that finished before its delay does not count), at most three
// times as many trials.
func killTrials() int {
	if v, err := strconv.Atoi(os.Getenv("HBXTEST_KILLS")); err == nil && v > 0 {
		return v
	}
	return 20
}

// killRandomly runs `hbx ARGS` and sends it SIGKILL after a random delay
// below *span, the length of an uninterrupted run; it returns the delay
// and the output, and whether the command finished first. A run that
// finished first and succeeded is an uninterrupted one as the machine
// runs it now: its length becomes *span. On a busy machine one run can take several times
// another's, and a span measured once in a slow minute would leave most
// later trials finished before their kill.
func killRandomly(t *testing.T, b *box, span *time.Duration, args ...string) (time.Duration, string, bool) {
	t.Helper()
	delay := time.Duration(mrand.Int64N(int64(*span)))
	cmd := exec.Command(binary(t), append([]string{"--config", b.config}, args...)...)
	cmd.Env = cleanEnv()
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		if err == nil {
			*span = time.Since(start)
		}
		return delay, out.String(), true
	case <-time.After(delay):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return delay, out.String(), false
	}
}

// leftovers returns the directories beside the data directory that were
// not there before and that nothing said: neither what the command
// printed nor the supervisor's log nor hbx status names them.
func leftovers(t *testing.T, b *box, s *supervised, before map[string]bool, said string) []string {
	t.Helper()
	said += readFile(t, s.log) + b.hbx("status").stdout
	var silent []string
	for p := range besideData(b) {
		if !before[p] && !strings.Contains(said, p) {
			silent = append(silent, p)
		}
	}
	return silent
}

// TestRandomKillUpgradeE2E kills hbx upgrade (1.0.0 -> 2.0.0) with
// SIGKILL at random times (HBXTEST_KILLS, 20 by default) across the
// length of an uninterrupted one, with the supervisor running and left
// running: each time it converges on its own to one version (release,
// pin and data format agree; hbx health passes), and no directory of data
// appears beside the data directory without being named (by the command,
// the supervisor's log or hbx status).
func TestRandomKillUpgradeE2E(t *testing.T) {
	requireE2E(t)
	b, s, v1, v2, _ := upgradeBox(t)
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v1 data", 0o600)
	var span time.Duration
	for range 2 { // the second one, with 2.0.0 already pulled, is timed
		start := time.Now()
		if r := b.hbx("upgrade", "--image", v2); r.code != 0 {
			t.Fatalf("hbx upgrade = %d\n%s", r.code, r.stderr)
		}
		span = time.Since(start)
		if r := b.hbx("rollback"); r.code != 0 {
			t.Fatalf("hbx rollback = %d\n%s", r.code, r.stderr)
		}
	}
	n := killTrials()
	converged, silentTrials, finished, onV2, trials := 0, 0, 0, 0, 0
	for i := 0; trials-finished < n && trials < 3*n; i++ {
		trials++
		before := besideData(b)
		delay, out, fin := killRandomly(t, b, &span, "upgrade", "--image", v2)
		if fin {
			finished++
		}
		took := waitConverged(t, b, "kill "+strconv.Itoa(i), 3*time.Minute)
		ver, img, st := b.activeVersion(), b.configuredImage(), readState(t, b.dataDir)
		gen := readFile(t, filepath.Join(b.dataDir, "generation"))
		if (ver == "1.0.0" && img == v1 && st.Format == 1 || ver == "2.0.0" && img == v2 && st.Format == 2) && gen == "v1 data" {
			converged++
		} else {
			t.Errorf("kill %d after %s: active %s, configured %s, data format %d, generation %q: not one version", i, delay, ver, img, st.Format, gen)
		}
		if silent := leftovers(t, b, s, before, out); len(silent) > 0 {
			silentTrials++
			t.Errorf("kill %d after %s: left %q beside the data directory without saying so", i, delay, silent)
		}
		t.Logf("kill %d after %s (finished first: %v): on %s, converged %s after", i, delay.Round(time.Millisecond), fin, ver, took.Round(time.Millisecond))
		if ver == "2.0.0" {
			onV2++
			if r := b.hbx("rollback"); r.code != 0 {
				t.Fatalf("kill %d: hbx rollback = %d\n%s", i, r.code, r.stderr)
			}
		}
	}
	t.Logf("hbx upgrade: %d trials, %d killed with kill -9 at random times over %s (%d finished first); %d ended on 2.0.0; %d of %d converged to one version; %d left data beside the data directory without saying so", trials, trials-finished, span.Round(time.Millisecond), finished, onV2, converged, trials, silentTrials)
	if trials-finished < n {
		t.Errorf("only %d of %d trials were killed before they finished", trials-finished, trials)
	}
}

// TestRandomKillRollbackE2E is TestRandomKillUpgradeE2E for hbx rollback
// (2.0.0 -> 1.0.0): each trial ends on 1.0.0 with the pre-upgrade data
// ("v1 data") and the data 2.0.0 wrote ("v2 data") kept aside and named,
// or on 2.0.0 with its data.
func TestRandomKillRollbackE2E(t *testing.T) {
	requireE2E(t)
	b, s, v1, v2, _ := upgradeBox(t)
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v1 data", 0o600)
	up := func(what string) {
		t.Helper()
		if r := b.hbx("upgrade", "--image", v2); r.code != 0 {
			t.Fatalf("%s: hbx upgrade = %d\n%s", what, r.code, r.stderr)
		}
		writeFile(t, filepath.Join(b.dataDir, "generation"), "v2 data", 0o600)
	}
	up("before the loop")
	start := time.Now()
	if r := b.hbx("rollback"); r.code != 0 {
		t.Fatalf("hbx rollback = %d\n%s", r.code, r.stderr)
	}
	span := time.Since(start)
	up("after the uninterrupted rollback")
	n := killTrials()
	converged, silentTrials, finished, onV1, trials := 0, 0, 0, 0, 0
	for i := 0; trials-finished < n && trials < 3*n; i++ {
		trials++
		before := besideData(b)
		delay, out, fin := killRandomly(t, b, &span, "rollback")
		if fin {
			finished++
		}
		took := waitConverged(t, b, "kill "+strconv.Itoa(i), 3*time.Minute)
		ver, img, st := b.activeVersion(), b.configuredImage(), readState(t, b.dataDir)
		gen := readFile(t, filepath.Join(b.dataDir, "generation"))
		one := ver == "1.0.0" && img == v1 && st.Format == 1 && gen == "v1 data" || ver == "2.0.0" && img == v2 && st.Format == 2 && gen == "v2 data"
		kept := ver != "1.0.0"
		for p := range besideData(b) {
			if !before[p] {
				if g, err := os.ReadFile(filepath.Join(p, "generation")); err == nil && string(g) == "v2 data" {
					kept = true
				}
			}
		}
		if one && kept {
			converged++
		} else {
			t.Errorf("kill %d after %s: active %s, configured %s, data format %d, generation %q, the v2 data kept aside: %v", i, delay, ver, img, st.Format, gen, kept)
		}
		if silent := leftovers(t, b, s, before, out); len(silent) > 0 {
			silentTrials++
			t.Errorf("kill %d after %s: left %q beside the data directory without saying so", i, delay, silent)
		}
		t.Logf("kill %d after %s (finished first: %v): on %s, converged %s after", i, delay.Round(time.Millisecond), fin, ver, took.Round(time.Millisecond))
		if ver == "1.0.0" {
			onV1++
			up("kill " + strconv.Itoa(i))
		}
	}
	t.Logf("hbx rollback: %d trials, %d killed with kill -9 at random times over %s (%d finished first); %d ended on 1.0.0; %d of %d converged to one version with nothing lost; %d left data beside the data directory without saying so", trials, trials-finished, span.Round(time.Millisecond), finished, onV1, converged, trials, silentTrials)
	if trials-finished < n {
		t.Errorf("only %d of %d trials were killed before they finished", trials-finished, trials)
	}
}

// TestRunningSupervisorUndoesInterruptedRestoreE2E: hbx restore of an
// archive written by another release, killed with SIGKILL right after it
// switched the runtime (the executor is FATAL on the mismatch, its reason
// naming the half-done restore and hbx backup / hbx supervise, never hbx
// install), and right after it pinned that release (runtime, pin and data are the archive's; its
// health never confirmed), with the supervisor running: the supervisor
// starts Executor on it when the hold drops, but hbx health (check
// release) and hbx status fail naming the interrupted restore until the
// running supervisor undoes it on its own, within seconds: the release,
// pin and data from before, said in its log.
func TestRunningSupervisorUndoesInterruptedRestoreE2E(t *testing.T) {
	requireE2E(t)
	gate := holdRecoveryFile(t)
	release := func() { os.Remove(gate) }
	defer release()
	b, s, v1, v2, x, _ := crossReleaseBox(t)

	// Killed right after the switch of current: the archive's runtime is
	// active, the config still pins the release before, so the executor
	// the supervisor starts when the hold drops is FATAL; its reason names
	// the half-done restore and what undoes it, not hbx install.
	if r := b.hbxEnv([]string{"HBX_CONFIG=" + b.config, killpoint.Env + "=" + killpoint.AfterSwitch}, "restore", x); r.code != -1 {
		t.Fatalf("hbx restore with %s=%s = %d, want killed\n%s", killpoint.Env, killpoint.AfterSwitch, r.code, r.stderr)
	}
	sts := s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Fatal})
	reason := statusOf(sts, "executor").Detail
	t.Logf("the executor's FATAL reason: %s", reason)
	for _, w := range []string{"a restore is half done", x, b.dataDir + ".restore.json", "`hbx backup`", "`hbx supervise`"} {
		if !strings.Contains(reason, w) {
			t.Errorf("the executor's FATAL reason %q does not say %q", reason, w)
		}
	}
	if strings.Contains(reason, "hbx install` first") {
		t.Errorf("the executor's FATAL reason says to run hbx install first: %q", reason)
	}
	release()
	took := waitConverged(t, b, "after the kill after the switch", 2*time.Minute)
	t.Logf("the running supervisor undid the restore killed after the switch %s after it was let", took.Round(time.Millisecond))
	if ver := oneVersion(t, b, "after the undo of the restore killed after the switch", v1, v2); ver != "1.0.0" {
		t.Errorf("after the undo: on %s, want 1.0.0", ver)
	}

	// Killed right after the pin (below).
	writeFile(t, gate, "", 0o600)
	if r := b.hbxEnv([]string{"HBX_CONFIG=" + b.config, killpoint.Env + "=" + killpoint.AfterPin}, "restore", x); r.code != -1 {
		t.Fatalf("hbx restore with %s=%s = %d, want killed\n%s", killpoint.Env, killpoint.AfterPin, r.code, r.stderr)
	}
	if _, err := os.Stat(b.dataDir + ".restore.json"); err != nil {
		t.Fatalf("no restore journal after the kill: %v", err)
	}
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	if got := b.activeVersion(); got != "2.0.0" {
		t.Fatalf("after the kill: active %s, want the archive's 2.0.0", got)
	}
	want := "restore of " + x + " interrupted"
	r := b.hbx("health")
	if r.code == 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("hbx health while the restore is interrupted = %d, want a failure saying %q:\n%s", r.code, want, r.stdout)
	}
	r = b.hbx("status")
	if r.code != 3 || !strings.Contains(r.stdout, want) {
		t.Errorf("hbx status while the restore is interrupted = %d, want 3 saying %q:\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	t.Logf("hbx status while unresolved:\n%s", r.stdout)

	release()
	took = waitConverged(t, b, "after the kill", 2*time.Minute)
	t.Logf("the running supervisor undid the interrupted restore %s after it was let", took.Round(time.Millisecond))
	if took > time.Minute {
		t.Errorf("resolved after %s, want promptly", took)
	}
	if ver := oneVersion(t, b, "after the running supervisor undid it", v1, v2); ver != "1.0.0" {
		t.Errorf("after the undo: on %s, want 1.0.0", ver)
	}
	log := readFile(t, s.log)
	if !strings.Contains(log, "interrupted restore recovered by the running supervisor") || !strings.Contains(log, "is active again") {
		t.Errorf("the supervisor's log does not say it undid the restore and switched the runtime back")
	}
	if left, _ := filepath.Glob(b.dataDir + ".restore*"); len(left) != 0 {
		t.Errorf("left after the undo: %q", left)
	}
}
