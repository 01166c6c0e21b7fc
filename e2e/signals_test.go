package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
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

// TestInstallDamagedCurrentE2E: when the active release's release.json is
// damaged (or current points to a release directory that is gone), hbx
// install of another image while Executor runs over its data must not
// swap the release under it without a backup: the guard treats "cannot
// read the active release" as "repair in place" even when the configured
// image is another one.
func TestInstallDamagedCurrentE2E(t *testing.T) {
	requireE2E(t)
	b, _, v1ref, v2ref, _ := upgradeBox(t)
	plat := platform(t)
	m1, m2 := testImage(t).Manifests[plat], versionImage(t, "2.0.0").Manifests[plat]
	v1cur := b.current()
	meta := filepath.Join(b.runtimeDir, v1cur, "release.json")
	if err := os.WriteFile(meta, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := config.WritePin(b.config, v2ref, plat, m2.String()); err != nil {
		t.Fatal(err)
	}
	r := b.hbx("install")
	t.Logf("hbx install (v2, damaged active release.json, Executor running) = %d: %s", r.code, lastLine(r.stderr))
	if got := b.current(); got != v1cur {
		t.Errorf("current -> %q, want %q: the release changed under the running Executor and its data without a backup (hbx install = %d)\n%s", got, v1cur, r.code, r.stdout)
	}
	if r.code == 0 || !strings.Contains(r.stderr, "hbx upgrade") {
		t.Errorf("hbx install = %d, want a refusal pointing to hbx upgrade", r.code)
	}

	// The same (pinned) release is still repaired in place.
	if err := config.WritePin(b.config, v1ref, plat, m1.String()); err != nil {
		t.Fatal(err)
	}
	if r := b.hbx("install"); r.code != 0 || b.current() != v1cur {
		t.Fatalf("hbx install (v1 pinned, damaged release.json) = %d, current %q; want the repair in place\n%s", r.code, b.current(), r.stderr)
	}
	// current dangling (its release directory removed): still no swap.
	if err := os.RemoveAll(filepath.Join(b.runtimeDir, v1cur)); err != nil {
		t.Fatal(err)
	}
	if err := config.WritePin(b.config, v2ref, plat, m2.String()); err != nil {
		t.Fatal(err)
	}
	r = b.hbx("install")
	t.Logf("hbx install (v2, dangling current, Executor running) = %d: %s", r.code, lastLine(r.stderr))
	if got := b.current(); got != v1cur || r.code == 0 {
		t.Errorf("dangling current: hbx install = %d, current -> %q; want a refusal and %q", r.code, got, v1cur)
	}
}

// TestInstallSwitchSignalsE2E: a signal reaching hbx install (a recorded
// change over existing data, Executor stopped) during its pre-change
// backup — SIGINT (Ctrl-C), SIGTERM, SIGKILL — leaves the old release
// active, no archive or temporary file behind, no open journal that a
// later command would mistake for an upgrade to roll back, and the next
// hbx install makes the change.
func TestInstallSwitchSignalsE2E(t *testing.T) {
	requireE2E(t)
	b, s, _, v2ref, _ := upgradeBox(t)
	plat := platform(t)
	m2 := versionImage(t, "2.0.0").Manifests[plat]
	big := make([]byte, 48<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(b.dataDir, "big.sqlite"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := b.hbx("stop", "executor"); r.code != 0 {
		t.Fatalf("hbx stop executor = %d\n%s", r.code, r.stderr)
	}
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Stopped})
	if err := config.WritePin(b.config, v2ref, plat, m2.String()); err != nil {
		t.Fatal(err)
	}
	v1cur := b.current()
	backups := filepath.Join(b.dir, "backups")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL} {
		cmd := exec.Command(binary(t), "--config", b.config, "install", "--json")
		cmd.Env = cleanEnv()
		var errb strings.Builder
		cmd.Stderr = &errb
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var stdout strings.Builder
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			stdout.WriteString(sc.Text() + "\n")
			if !sent && strings.Contains(sc.Text(), `"event":"backing-up"`) {
				// Let the archive start.
				deadline := time.Now().Add(20 * time.Second)
				for time.Now().Before(deadline) && len(archivesIn(backups)) == 0 {
					time.Sleep(5 * time.Millisecond)
				}
				cmd.Process.Signal(sig)
				sent = true
			}
		}
		io.Copy(io.Discard, out)
		werr := cmd.Wait()
		if !sent {
			t.Fatalf("%v: hbx install never reached backing-up (%v)\n%s%s", sig, werr, stdout.String(), errb.String())
		}
		t.Logf("%v: %v; last stdout %s; stderr: %s", sig, werr, lastLine(stdout.String()), lastLine(errb.String()))
		errorLines(t, errb.String())
		if werr == nil {
			t.Errorf("%v: hbx install exited 0 after the signal during the pre-change backup", sig)
		}
		if got := b.current(); got != v1cur {
			t.Errorf("%v: current -> %q, want %q", sig, got, v1cur)
		}
		if sig != syscall.SIGKILL {
			if a := archivesIn(backups); len(a) != 0 {
				t.Errorf("%v: the backup dir holds %q after the interrupted pre-change backup", sig, a)
			}
			res := lastLine(stdout.String())
			if !strings.Contains(res, `"event":"result"`) {
				t.Errorf("%v: --json does not end with the result line: %q", sig, res)
			}
			// Nothing was running (Executor stopped): nothing is
			// "not healthy", and no raw "context canceled".
			if strings.Contains(res, "not healthy") || strings.Contains(res, "context canceled") || !strings.Contains(res, "nothing was activated") {
				t.Errorf("%v: the error does not say plainly what happened: %s", sig, res)
			}
		}
		r := b.hbx("rollback")
		t.Logf("%v: hbx rollback = %d: %s", sig, r.code, lastLine(r.stderr))
		// After SIGINT/SIGTERM the install closed its own journal: nothing
		// to roll back (exit 1). After SIGKILL the journal is left open:
		// rollback recovers it, which is what was asked (exit 0, saying so),
		// unless the running supervisor's watcher recovered it first once
		// the killed install's lock was free (its log says so): then
		// nothing is left to roll back (exit 1), as after SIGINT.
		recovered := sig == syscall.SIGKILL && r.code == 0 && strings.Contains(r.stdout, "nothing more to roll back")
		watcherFirst := sig == syscall.SIGKILL && strings.Contains(readFile(t, s.log), "interrupted upgrade recovered by the running supervisor")
		refused := (sig != syscall.SIGKILL || watcherFirst) && r.code != 0
		if !(recovered || refused) || b.current() != v1cur {
			t.Errorf("%v: hbx rollback = %d after an interrupted change (current %q): want the release before, and a refusal (closed journal) or a recovery (open journal)\n%s", sig, r.code, b.current(), r.stdout)
		}
	}
	// A pre-change backup that fails on its own (backup.dir cannot be
	// created) with nothing running: one line, at once, nothing claimed
	// unhealthy (it waited backup.health_wait for a stopped Executor).
	if err := os.Rename(backups, backups+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(backups, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	r := b.hbx("install")
	took := time.Since(t0)
	t.Logf("backup.dir a file: hbx install = %d in %s: %s", r.code, took.Round(time.Millisecond), lastLine(r.stderr))
	if r.code != 1 || strings.Contains(lastLine(r.stderr), "not healthy") || took > 12*time.Second {
		t.Errorf("hbx install with a failing pre-change backup = %d after %s: %s; want 1 at once, nothing called unhealthy", r.code, took, lastLine(r.stderr))
	}
	if err := os.Remove(backups); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(backups+".away", backups); err != nil {
		t.Fatal(err)
	}
	r = b.hbx("install")
	if r.code != 0 || b.activeVersion() != "2.0.0" {
		t.Fatalf("hbx install after the interruptions = %d, version %q\n%s%s", r.code, b.activeVersion(), r.stdout, r.stderr)
	}
	if a := archivesIn(backups); len(a) != 3 {
		t.Errorf("backup dir after the change holds %q; want the pre-change archive and its two sidecars only", a)
	}
}

// TestUpgradeInterruptedBackupE2E: Ctrl-C reaching hbx upgrade during its
// pre-upgrade backup, with Executor running: the old release stays active,
// the services come back and the error says so (it said "not healthy"
// because the health wait used the cancelled context), and names the
// interrupt instead of a raw "context canceled".
func TestUpgradeInterruptedBackupE2E(t *testing.T) {
	requireE2E(t)
	b, s, _, v2ref, _ := upgradeBox(t)
	big := make([]byte, 48<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(b.dataDir, "big.sqlite"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	v1cur := b.current()
	backups := filepath.Join(b.dir, "backups")
	cmd := exec.Command(binary(t), "--config", b.config, "upgrade", "--image", v2ref, "--json")
	cmd.Env = cleanEnv()
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	sc := bufio.NewScanner(out)
	sent := false
	for sc.Scan() {
		stdout.WriteString(sc.Text() + "\n")
		if !sent && strings.Contains(sc.Text(), `"event":"backing-up"`) {
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) && len(archivesIn(backups)) == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			cmd.Process.Signal(syscall.SIGINT)
			sent = true
		}
	}
	io.Copy(io.Discard, out)
	werr := cmd.Wait()
	if !sent {
		t.Fatalf("hbx upgrade never reached backing-up (%v)\n%s%s", werr, stdout.String(), errb.String())
	}
	res := strings.Join(errorLines(t, errb.String()), "\n")
	t.Logf("hbx upgrade interrupted: %v; %s", werr, res)
	if werr == nil || b.current() != v1cur {
		t.Errorf("hbx upgrade = %v, current %q; want exit 1 and %q", werr, b.current(), v1cur)
	}
	if strings.Contains(res, "not healthy") || strings.Contains(res, "context canceled") || !strings.Contains(res, "nothing was activated") || !strings.Contains(res, "healthy on") {
		t.Errorf("the error does not say plainly that nothing was activated and the services are healthy again: %s", res)
	}
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
}

// interruptedAt runs `hbx ARGS --json` and sends sig as soon as it printed
// its k-th (0-based) event, then waits for it. It returns the event ("" when
// hbx finished first), the exit code and stderr.
func interruptedAt(t *testing.T, b *box, sig syscall.Signal, k int, args ...string) (string, int, string) {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"--config", b.config}, append(args, "--json")...)...)
	cmd.Env = cleanEnv()
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	n, at := 0, ""
	for sc.Scan() {
		var ev struct{ Event string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Event == "result" {
			continue
		}
		if n == k {
			cmd.Process.Signal(sig)
			at = ev.Event
			break
		}
		n++
	}
	io.Copy(io.Discard, out)
	err = cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return at, code, errb.String()
}

// TestInterruptDuringRestoreE2E: Ctrl-C (SIGINT) reaching hbx restore at
// each step leaves the data directory entirely old or entirely restored;
// before the swap it changes nothing and says so in one line, from the
// swap on the restore is finished (exit 0, the archive's data) rather than
// left for the next command to undo under programs already writing to the
// restored data (it was: "services did not become healthy: context
// canceled ... the next hbx start undoes it", with the journal left);
// the programs run again; nothing is left beside the data directory.
func TestInterruptDuringRestoreE2E(t *testing.T) {
	requireE2E(t)
	b, s, _ := backupBox(t, "")
	os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("archived"), 0o600)
	r := b.hbx("backup", "--json")
	if r.code != 0 {
		t.Fatalf("hbx backup = %d: %s", r.code, r.stderr)
	}
	archive := lastJSON(t, r.stdout)["path"].(string)
	newTree := stableFiles(t, b.dataDir)
	points := 0
	for k := 0; ; k++ {
		os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("live"), 0o600)
		os.WriteFile(filepath.Join(b.dataDir, "live-only"), []byte("x"), 0o600)
		oldTree := stableFiles(t, b.dataDir)
		at, code, stderr := interruptedAt(t, b, syscall.SIGINT, k, "restore", archive)
		if at == "" {
			break
		}
		points++
		lines := errorLines(t, stderr)
		now := stableFiles(t, b.dataDir)
		isOld, isNew := sameFiles(now, oldTree), sameFiles(now, newTree)
		t.Logf("SIGINT at %s: exit %d, data %s: %s", at, code, map[bool]string{true: "old", false: "new"}[isOld], strings.Join(lines, " | "))
		if !isOld && !isNew {
			t.Errorf("SIGINT at %s: the data directory is mixed: %q", at, keys(now))
		}
		if code != 0 && (len(lines) != 1 || !isOld || !strings.Contains(lines[0], "nothing changed")) {
			t.Errorf("SIGINT at %s: exit %d with error lines %q; want one line saying nothing changed", at, code, lines)
		}
		if code == 0 && !isNew {
			t.Errorf("SIGINT at %s: exit 0 but the data is the old tree", at)
		}
		s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running})
		if left, _ := filepath.Glob(b.dataDir + ".restore*"); len(left) != 0 {
			t.Errorf("SIGINT at %s: left beside the data directory: %q", at, left)
		}
	}
	if points < 4 {
		t.Errorf("only %d interrupt points", points)
	}
}

// TestInterruptUpgradeAfterActivationE2E: Ctrl-C reaching hbx upgrade at
// each step after the pre-upgrade backup ends with one consistent state:
// either the new release active and healthy, or the old one with its
// data; the programs run; no open journal is left for a later command to
// act on.
func TestInterruptUpgradeAfterActivationE2E(t *testing.T) {
	requireE2E(t)
	b, s, _, v2ref, _ := upgradeBox(t)
	v1cur := b.current()
	for k := 0; ; k++ {
		at, code, stderr := interruptedAt(t, b, syscall.SIGINT, k, "upgrade", "--image", v2ref)
		if at == "" {
			t.Fatalf("hbx upgrade finished before step %d", k)
		}
		lines := errorLines(t, stderr)
		t.Logf("SIGINT at %s: exit %d, current %s: %s", at, code, b.current(), strings.Join(lines, " | "))
		s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
		if b.current() == v1cur {
			if code == 0 {
				t.Errorf("SIGINT at %s: exit 0 but the old release is active", at)
			}
		} else if code != 0 {
			t.Errorf("SIGINT at %s: exit %d but the new release is active: %q", at, code, lines)
		}
		if j, err := upgrade.ReadJournal(b.runtimeDir); err == nil && j != nil && j.Phase != upgrade.PhaseDone && j.Phase != upgrade.PhaseRolledBack && j.Phase != upgrade.PhaseAborted {
			t.Errorf("SIGINT at %s: the upgrade journal is left in phase %q", at, j.Phase)
		}
		if left, _ := filepath.Glob(b.dataDir + ".restore*"); len(left) != 0 {
			t.Errorf("SIGINT at %s: left beside the data directory: %q", at, left)
		}
		if b.current() != v1cur {
			break
		}
	}
}
