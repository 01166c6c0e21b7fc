package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/procscan"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

// TestWatcherUndoesChangeOfReusedPIDE2E: hbx upgrade killed with SIGKILL
// as its health wait starts leaves its holder record in hbx.lock; when
// that pid is reused by an unrelated live process, the running
// supervisor's watcher took the record for a live holder and never undid
// the change (hbx status and health said "in progress" for ever). It must
// see that the process does not hold the lock and roll the change back.
func TestWatcherUndoesChangeOfReusedPIDE2E(t *testing.T) {
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
	// The watcher is held before its recovery, or sees the lock held
	// below: either way it does not undo the change while this test
	// holds the lock.
	lockPath := filepath.Join(b.runtimeDir, upgrade.LockFile)
	lk, err := lock.Acquire(context.Background(), lockPath, "e2e", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	release()
	// Let a recovery held at the gate find the lock taken (it tries once
	// and waits for the next tick); were it slower, the change is undone
	// below anyway and only the old fault goes unseen.
	time.Sleep(3 * time.Second)
	if j, err := upgrade.ReadJournal(b.runtimeDir); err != nil || j == nil || j.Phase != upgrade.PhaseActivating {
		t.Fatalf("journal while this test holds %s: %+v, %v; want phase activating", lockPath, j, err)
	}
	// The killed upgrade's pid, reused by a process that never opened
	// the lock file.
	other := exec.Command("sleep", "600")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	if err := lk.Unlock(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, lockPath, `{"pid":`+strconv.Itoa(other.Process.Pid)+`,"command":"hbx upgrade","since":"2026-01-01T00:00:00Z"}`+"\n", 0o600)
	waitConverged(t, b, "after the holder's pid was reused", 90*time.Second)
	onRelease(t, b, "after the running supervisor resolved it", "1.0.0", v1, "v1 data", 1)
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	if _, err := os.Stat(lockPath); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptJournalsE2E: a truncated upgrade.json or <data_dir>.restore.json
// (a disk fault, a hand edit) neither stops nor hangs the supervisor nor
// keeps the programs from starting; hbx status fails naming the file and
// what to do (upgrade.json named no remedy), and the running supervisor's
// watcher says it cannot recover the restore (it went on silently, every
// second).
func TestCorruptJournalsE2E(t *testing.T) {
	requireE2E(t)
	b, s, _, _, _ := upgradeBox(t)
	running := map[string]supervisor.State{"executor": supervisor.Running}
	statusSays := func(what string, want ...string) {
		t.Helper()
		r := b.hbx("status")
		if r.code != 3 {
			t.Errorf("hbx status with %s = %d, want 3\n%s%s", what, r.code, r.stdout, r.stderr)
		}
		for _, w := range want {
			if !strings.Contains(r.stdout+r.stderr, w) {
				t.Errorf("hbx status with %s does not say %q:\n%s%s", what, w, r.stdout, r.stderr)
			}
		}
	}
	logSays := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(readFile(t, s.log), want) {
			if time.Now().After(deadline) {
				t.Errorf("%s: the supervisor's log does not say %q", what, want)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	alive := func(what string) {
		t.Helper()
		select {
		case err := <-s.exited:
			t.Fatalf("%s: hbx supervise exited: %v\n%s", what, err, readFile(t, s.log))
		default:
		}
		s.waitStates(60*time.Second, running)
		healthyAt(t, b.port, 60*time.Second)
	}
	restart := func(what string) {
		t.Helper()
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-s.exited:
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: hbx supervise did not stop within 60s of SIGTERM\n%s", what, readFile(t, s.log))
		}
		s = startSupervise(t, b, s.socket, s.dir)
	}

	uj := filepath.Join(b.runtimeDir, upgrade.JournalFile)
	writeFile(t, uj, `{"format":1,"phase":"activ`, 0o600)
	logSays("truncated upgrade.json", "an interrupted upgrade could not be recovered")
	alive("truncated upgrade.json")
	statusSays("a truncated upgrade.json", uj, "does not parse", "move it away")
	restart("truncated upgrade.json")
	logSays("truncated upgrade.json, restarted", "an interrupted upgrade could not be recovered")
	alive("truncated upgrade.json, restarted")
	os.Remove(uj)

	rj := b.dataDir + ".restore.json"
	writeFile(t, rj, `{"format":1,"phase":"swap`, 0o600)
	restart("truncated restore.json")
	alive("truncated restore.json, restarted")
	logSays("truncated restore.json", "an interrupted restore could not be recovered; retrying in a minute")
	statusSays("a truncated restore.json", rj, "does not parse", "move it away")
	os.Remove(rj)
	deadline := time.Now().Add(30 * time.Second)
	for r := b.hbx("status"); r.code != 0; r = b.hbx("status") {
		if time.Now().After(deadline) {
			t.Fatalf("hbx status with the journals moved away = %d, want 0\n%s%s", r.code, r.stdout, r.stderr)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestStoppedUpgradeE2E: hbx upgrade stopped with SIGSTOP in its health
// wait still holds hbx.lock: the running supervisor leaves the change
// alone, and hbx status and health fail naming the upgrade stopped and
// what lets it go on (they said only "in progress"). Killed, the running
// supervisor undoes it, also with the payload stopped (a SIGTERM it
// never handles: the hold's stopwaitsecs then SIGKILL) and the
// supervisor sent SIGHUP, SIGUSR1 and SIGUSR2 meanwhile.
func TestStoppedUpgradeE2E(t *testing.T) {
	requireE2E(t)
	gate := holdRecoveryFile(t)
	b, s, v1, v2, _ := upgradeBox(t)
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v1 data", 0o600)
	cmd := exec.Command(binary(t), "--config", b.config, "upgrade", "--image", v2, "--json")
	cmd.Env = cleanEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(out)
	stopped := false
	for sc.Scan() {
		var ev struct{ Event string }
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == "health" {
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			stopped = true
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if !stopped {
		t.Fatal("hbx upgrade ended before its health wait")
	}
	os.Remove(gate) // the watcher is free to act: it must see the holder
	pid := strconv.Itoa(cmd.Process.Pid)
	deadline := time.Now().Add(30 * time.Second)
	var r result
	for {
		r = b.hbx("status")
		if strings.Contains(r.stdout+r.stderr, "is stopped") || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r.code != 3 {
		t.Errorf("hbx status with the upgrade stopped = %d, want 3", r.code)
	}
	for _, w := range []string{"in progress", "pid " + pid + " is stopped", "kill -CONT " + pid} {
		if !strings.Contains(r.stdout+r.stderr, w) {
			t.Errorf("hbx status with the upgrade stopped does not say %q:\n%s%s", w, r.stdout, r.stderr)
		}
	}
	if h := b.hbx("health"); h.code == 0 || !strings.Contains(h.stdout, "pid "+pid+" is stopped") {
		t.Errorf("hbx health with the upgrade stopped = %d, want a failure naming it stopped:\n%s", h.code, h.stdout)
	}
	logSaysStopped := false
	for deadline := time.Now().Add(30 * time.Second); !logSaysStopped && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		logSaysStopped = strings.Contains(readFile(t, s.log), "pid "+pid+" is stopped")
	}
	if !logSaysStopped {
		t.Errorf("the supervisor's log does not say the upgrade's pid %s is stopped", pid)
	}
	time.Sleep(2 * time.Second) // the watcher ticks every second
	if j, err := upgrade.ReadJournal(b.runtimeDir); err != nil || j == nil || j.Phase != upgrade.PhaseActivating {
		t.Fatalf("journal with the upgrade stopped: %+v, %v; want it left in phase activating", j, err)
	}

	// Killed, with the payload stopped and the supervisor signalled
	// during the recovery's hold.
	writeFile(t, gate, "", 0o600)
	sts := s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	exe := statusOf(sts, "executor").PID
	if exe <= 0 {
		t.Fatalf("no executor pid in %+v", sts)
	}
	if err := syscall.Kill(exe, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2} {
		if err := s.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(gate)
	waitConverged(t, b, "after the stopped upgrade was killed", 2*time.Minute)
	onRelease(t, b, "after the running supervisor resolved it", "1.0.0", v1, "v1 data", 1)
	if log := readFile(t, s.log); !strings.Contains(log, "stopwaitsecs passed, killing the process group") || !strings.Contains(log, "recovered by the running supervisor") {
		t.Errorf("the supervisor's log does not say it killed the stopped payload after stopwaitsecs and recovered the upgrade")
	}
	select {
	case err := <-s.exited:
		t.Fatalf("hbx supervise exited: %v", err)
	default:
	}
}

// TestSupervisorKilledInItsRecoveryE2E: the running supervisor killed
// with SIGKILL while it rolls back an interrupted upgrade (journal phase
// rolling-back, its programs held): the next hbx supervise stops what
// the dead one left, finishes the rollback and runs the old release on
// the pre-upgrade data, healthy.
func TestSupervisorKilledInItsRecoveryE2E(t *testing.T) {
	requireE2E(t)
	gate := holdRecoveryFile(t)
	b, s, v1, v2, _ := upgradeBox(t)
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v1 data", 0o600)
	if r := b.hbxEnv([]string{"HBX_CONFIG=" + b.config, killpoint.Env + "=" + killpoint.UpgradeHealthWait}, "upgrade", "--image", v2); r.code != -1 {
		t.Fatalf("hbx upgrade with %s=%s = %d, want killed\n%s", killpoint.Env, killpoint.UpgradeHealthWait, r.code, r.stderr)
	}
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	os.Remove(gate)
	deadline := time.Now().Add(60 * time.Second)
	for {
		j, _ := upgrade.ReadJournal(b.runtimeDir)
		if j != nil && j.Phase == upgrade.PhaseRollingBack {
			break
		}
		if j != nil && !j.Pending() || time.Now().After(deadline) {
			t.Fatalf("journal %+v: never saw the running supervisor's rollback in progress", j)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.exited
	s = startSupervise(t, b, s.socket, s.dir)
	waitConverged(t, b, "after the supervisor died in its recovery", 2*time.Minute)
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	onRelease(t, b, "after the next supervisor finished the rollback", "1.0.0", v1, "v1 data", 1)
}

// setLockWait sets backup.lock_wait (0 by default: a command finding
// hbx.lock held fails at once, as it would beside the recovery) in b's
// config, after upgradeBox.
func setLockWait(t *testing.T, b *box, d string) {
	t.Helper()
	c := readFile(t, b.config)
	n := strings.Replace(c, "  health_wait: 15s\n", "  health_wait: 15s\n  lock_wait: "+d+"\n", 1)
	if n == c {
		t.Fatal("no backup.health_wait: 15s in the config")
	}
	writeFile(t, b.config, n, 0o600)
}

// TestUpgradeBesideWatcherRecoveryE2E: an operator's hbx upgrade started
// as the running supervisor begins to undo an interrupted one: the two
// take hbx.lock in turn, the interrupted upgrade is rolled back (by
// whichever comes first) and the new one completes: v2 on the data
// migrated from v1, healthy, the journal done.
func TestUpgradeBesideWatcherRecoveryE2E(t *testing.T) {
	requireE2E(t)
	gate := holdRecoveryFile(t)
	b, s, _, v2, _ := upgradeBox(t)
	setLockWait(t, b, "2m")
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v1 data", 0o600)
	if r := b.hbxEnv([]string{"HBX_CONFIG=" + b.config, killpoint.Env + "=" + killpoint.UpgradeHealthWait}, "upgrade", "--image", v2); r.code != -1 {
		t.Fatalf("hbx upgrade with %s=%s = %d, want killed\n%s", killpoint.Env, killpoint.UpgradeHealthWait, r.code, r.stderr)
	}
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v1 data", 0o600)
	done := b.hbxAsync("upgrade", "--image", v2)
	os.Remove(gate)
	var r result
	select {
	case o := <-done:
		r = b.settle(o)
	case <-time.After(5 * time.Minute):
		t.Fatal("hbx upgrade beside the recovery did not end within 5 minutes")
	}
	if r.code != 0 {
		t.Fatalf("hbx upgrade beside the running supervisor's recovery = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	waitConverged(t, b, "after both", 2*time.Minute)
	if j, err := upgrade.ReadJournal(b.runtimeDir); err != nil || j == nil || j.Phase != upgrade.PhaseDone {
		t.Fatalf("journal after both: %+v, %v; want done", j, err)
	}
	onRelease(t, b, "after both", "2.0.0", v2, "v1 data", 2)
}

// TestSupervisorStoppedInItsRecoveryE2E: SIGTERM to the running
// supervisor while its recovery of an interrupted upgrade waits for a
// payload that does not stop (SIGSTOPped: SIGTERM pending, SIGKILL after
// stopwaitsecs): it exits within stopwaitsecs and a margin, neither
// hanging on the hold nor leaving a process, and the next hbx supervise
// finishes the rollback.
func TestSupervisorStoppedInItsRecoveryE2E(t *testing.T) {
	requireE2E(t)
	gate := holdRecoveryFile(t)
	b, s, v1, v2, _ := upgradeBox(t)
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v1 data", 0o600)
	if r := b.hbxEnv([]string{"HBX_CONFIG=" + b.config, killpoint.Env + "=" + killpoint.UpgradeHealthWait}, "upgrade", "--image", v2); r.code != -1 {
		t.Fatalf("hbx upgrade with %s=%s = %d, want killed\n%s", killpoint.Env, killpoint.UpgradeHealthWait, r.code, r.stderr)
	}
	sts := s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	exe := statusOf(sts, "executor").PID
	if exe <= 0 {
		t.Fatalf("no executor pid in %+v", sts)
	}
	pgid, err := syscall.Getpgid(exe)
	if err != nil {
		t.Fatal(err)
	}
	leader, err := procscan.ReadStat(pgid)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	os.Remove(gate)
	time.Sleep(500 * time.Millisecond) // any point of the recovery will do
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(90 * time.Second):
		t.Fatalf("hbx supervise did not exit within 90s of SIGTERM during its recovery\n%s", readFile(t, s.log))
	}
	t.Logf("hbx supervise exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	// The group's members now, unless its id names another group (its
	// leader pid another process): each killed by its identity.
	if left := procscan.Group(pgid); len(left) > 0 && !slices.ContainsFunc(left, func(m procscan.Stat) bool {
		return m.PID == pgid && m.StartTime != leader.StartTime || m.StartTime < leader.StartTime
	}) {
		for _, m := range left {
			m.Signal(syscall.SIGKILL)
		}
		t.Errorf("the executor's process group %d outlived hbx supervise: %v", pgid, left)
	}
	s = startSupervise(t, b, s.socket, s.dir)
	waitConverged(t, b, "after the supervisor stopped in its recovery", 2*time.Minute)
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	onRelease(t, b, "after the next supervisor finished the rollback", "1.0.0", v1, "v1 data", 1)
}

// TestRollbackRestoreBesideWatcherRecoveryE2E: hbx rollback, then hbx
// restore of the pre-upgrade archive, each started as the running
// supervisor begins to undo an interrupted upgrade: they take hbx.lock in
// turn (backup.lock_wait set); the rollback either is the recovery or says the recovery did it,
// the restore completes; each time the box ends on v1 with the v1 data,
// healthy, nothing half done.
func TestRollbackRestoreBesideWatcherRecoveryE2E(t *testing.T) {
	requireE2E(t)
	gate := holdRecoveryFile(t)
	b, s, v1, v2, _ := upgradeBox(t)
	setLockWait(t, b, "2m")
	for _, args := range [][]string{{"rollback"}, {"restore"}} {
		writeFile(t, gate, "", 0o600)
		writeFile(t, filepath.Join(b.dataDir, "generation"), "v1 data", 0o600)
		if r := b.hbxEnv([]string{"HBX_CONFIG=" + b.config, killpoint.Env + "=" + killpoint.UpgradeHealthWait}, "upgrade", "--image", v2); r.code != -1 {
			t.Fatalf("hbx upgrade with %s=%s = %d, want killed\n%s", killpoint.Env, killpoint.UpgradeHealthWait, r.code, r.stderr)
		}
		s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
		j, err := upgrade.ReadJournal(b.runtimeDir)
		if err != nil || j == nil || j.Backup == "" {
			t.Fatalf("journal after the kill: %+v, %v", j, err)
		}
		if args[0] == "restore" {
			args = append(args, j.Backup)
		}
		done := b.hbxAsync(args...)
		os.Remove(gate)
		var r result
		select {
		case o := <-done:
			r = b.settle(o)
		case <-time.After(5 * time.Minute):
			t.Fatalf("hbx %v beside the recovery did not end within 5 minutes", args)
		}
		t.Logf("hbx %v beside the recovery = %d\n%s%s", args[0], r.code, r.stdout, r.stderr)
		if r.code != 0 && !(args[0] == "rollback" && strings.Contains(r.stderr, "undone by the recovery")) {
			t.Errorf("hbx %v beside the running supervisor's recovery = %d, want 0 (or, for rollback, that the recovery undid it)", args, r.code)
		}
		waitConverged(t, b, "after "+args[0], 2*time.Minute)
		onRelease(t, b, "after "+args[0], "1.0.0", v1, "v1 data", 1)
	}
}
