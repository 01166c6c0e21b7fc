package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/supervisor"
)

// preUpgradeArchives lists the pre-upgrade archives in dir, oldest first.
func preUpgradeArchives(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, n := range archivesIn(dir) {
		if strings.HasPrefix(n, "pre-upgrade-") && strings.HasSuffix(n, ".gpg") {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out
}

// onRelease checks that version is active and ref configured, Executor is
// healthy, and the data directory holds generation gen in state format
// format.
func onRelease(t *testing.T, b *box, what, version, ref, gen string, format int) {
	t.Helper()
	if got := b.activeVersion(); got != version {
		t.Errorf("%s: active version %q, want %s", what, got, version)
	}
	if got := b.configuredImage(); got != ref {
		t.Errorf("%s: configured image %q, want %q", what, got, ref)
	}
	if got := readFile(t, filepath.Join(b.dataDir, "generation")); got != gen {
		t.Errorf("%s: generation %q, want %q", what, got, gen)
	}
	if st := readState(t, b.dataDir); st.Format != format {
		t.Errorf("%s: state %+v, want format %d", what, st, format)
	}
	if r := b.hbx("health"); r.code != 0 {
		t.Errorf("%s: hbx health = %d: %s%s", what, r.code, r.stdout, r.stderr)
	}
}

// TestRestoreAcrossReleasesE2E is issue 12's scenario with a running
// supervisor: an archive written by another release is restored with its
// runtime and its pin (in the config file) together, and the pre-upgrade
// archive of an earlier upgrade is a way back even after a later upgrade
// rolled itself back. A restore whose release change cannot be pinned
// (executor.image set by an HBX_* variable) is refused with nothing
// changed.
func TestRestoreAcrossReleasesE2E(t *testing.T) {
	requireE2E(t)
	b, _, v1, v2, v3 := upgradeBox(t)
	backups := filepath.Join(b.dir, "backups")
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v1 data", 0o600)

	// v1 -> v2; an archive X written by v2; back to v1.
	if r := b.hbx("upgrade", "--image", v2); r.code != 0 {
		t.Fatalf("hbx upgrade to v2 = %d\n%s", r.code, r.stderr)
	}
	pre := preUpgradeArchives(t, backups)
	if len(pre) != 1 {
		t.Fatalf("pre-upgrade archives %q, want one", pre)
	}
	v1Archive := pre[0]
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v2 data", 0o600)
	r := b.hbx("backup", "--json")
	if r.code != 0 {
		t.Fatalf("hbx backup = %d: %s", r.code, r.stderr)
	}
	x := lastJSON(t, r.stdout)["path"].(string)
	if r := b.hbx("rollback"); r.code != 0 {
		t.Fatalf("hbx rollback = %d\n%s", r.code, r.stderr)
	}
	onRelease(t, b, "after the rollback", "1.0.0", v1, "v1 data", 1)

	// Refused while the pin comes from the environment: nothing changes.
	before := stableFiles(t, b.dataDir)
	cfgBefore := readFile(t, b.config)
	r = b.hbxEnv([]string{"HBX_CONFIG=" + b.config, "HBX_EXECUTOR_IMAGE=" + v1}, "restore", x)
	if r.code == 0 || !strings.Contains(r.stderr, "HBX_EXECUTOR_IMAGE") {
		t.Errorf("hbx restore X with HBX_EXECUTOR_IMAGE set = %d, want a refusal naming it\n%s", r.code, r.stderr)
	}
	t.Logf("refused: %s", lastLine(r.stderr))
	if got := stableFiles(t, b.dataDir); !sameFiles(got, before) {
		t.Errorf("a refused restore changed the data: %q", keys(got))
	}
	if readFile(t, b.config) != cfgBefore || b.activeVersion() != "1.0.0" {
		t.Errorf("a refused restore changed the config or the runtime (active %s)", b.activeVersion())
	}

	// Restore X: v2's runtime, pin and data together.
	r = b.hbx("restore", x)
	if r.code != 0 {
		t.Fatalf("hbx restore X (written by v2, v1 active) = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("restore X: %s", strings.TrimSpace(r.stdout))
	onRelease(t, b, "after restoring X", "2.0.0", v2, "v2 data", 2)
	if !strings.Contains(readFile(t, b.config), "a comment that must survive") {
		t.Errorf("the restore lost the config file's comment")
	}

	// v2 -> v3 rolls itself back; rollback has nothing left to do.
	if r := b.hbx("upgrade", "--image", v3); r.code != 1 {
		t.Fatalf("hbx upgrade to the failing v3 = %d, want 1\n%s", r.code, r.stderr)
	}
	onRelease(t, b, "after v3 rolled back", "2.0.0", v2, "v2 data", 2)
	if r := b.hbx("rollback"); r.code == 0 {
		t.Errorf("hbx rollback after a rolled-back upgrade = 0, want a refusal")
	}

	// The v1 pre-upgrade archive is still a way back.
	r = b.hbx("restore", v1Archive)
	if r.code != 0 {
		t.Fatalf("hbx restore of the v1 pre-upgrade archive = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("restore v1 pre-upgrade: %s", strings.TrimSpace(r.stdout))
	onRelease(t, b, "after restoring the v1 pre-upgrade archive", "1.0.0", v1, "v1 data", 1)
	// v1's release stayed previous through v3's failed upgrade (refused,
	// or rolled back with previous pointed back at v1): the restore
	// reactivated it in place; current and previous are all that is left.
	if rels := runtimeFootprint(t, b, "after restoring the v1 pre-upgrade archive"); len(rels) != 2 || !strings.Contains(r.stdout, "note: pruned old releases: ") {
		t.Errorf("after the restore: releases %q, output %q; want current and previous only, the restore saying what it pruned", rels, r.stdout)
	}
	if _, err := os.Stat(b.dataDir + ".restore.json"); err == nil {
		t.Errorf("the restore journal is left")
	}
}

// crossReleaseBox is an upgradeBox taken through v1 -> v2, an archive X
// written by v2, and hbx rollback: 1.0.0 is active on its data ("v1
// data"), X holds "v2 data", preV1 is the v1 pre-upgrade archive.
func crossReleaseBox(t *testing.T) (b *box, s *supervised, v1, v2, x, preV1 string) {
	t.Helper()
	b, s, v1, v2, _ = upgradeBox(t)
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v1 data", 0o600)
	if r := b.hbx("upgrade", "--image", v2); r.code != 0 {
		t.Fatalf("hbx upgrade to v2 = %d\n%s", r.code, r.stderr)
	}
	preV1 = preUpgradeArchives(t, filepath.Join(b.dir, "backups"))[0]
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v2 data", 0o600)
	r := b.hbx("backup", "--json")
	if r.code != 0 {
		t.Fatalf("hbx backup = %d: %s", r.code, r.stderr)
	}
	x = lastJSON(t, r.stdout)["path"].(string)
	if r := b.hbx("rollback"); r.code != 0 {
		t.Fatalf("hbx rollback = %d\n%s", r.code, r.stderr)
	}
	return b, s, v1, v2, x, preV1
}

// oneVersion returns the version the box is on, failing the test unless
// the active release, the configured one, the data format and the data
// all belong to the same version.
func oneVersion(t *testing.T, b *box, at, v1, v2 string) string {
	t.Helper()
	ver, img, st := b.activeVersion(), b.configuredImage(), readState(t, b.dataDir)
	gen := readFile(t, filepath.Join(b.dataDir, "generation"))
	switch {
	case ver == "1.0.0" && img == v1 && st.Format == 1 && gen == "v1 data":
	case ver == "2.0.0" && img == v2 && st.Format == 2 && gen == "v2 data":
	default:
		t.Fatalf("killed at %s: active %s, configured %s, data format %d, generation %q: not one version", at, ver, img, st.Format, gen)
	}
	return ver
}

// checkRecoveryText: a recovery after a kill that left the archive's
// runtime active says it switched the runtime back, and one that found
// something changed never says nothing had.
func checkRecoveryText(t *testing.T, at, msg string, switched bool) {
	t.Helper()
	if switched && !strings.Contains(msg, "is active again") {
		t.Errorf("killed at %s with the archive's runtime active: the recovery says %q, want it to say the runtime before is active again", at, msg)
	}
	if switched && strings.Contains(msg, "nothing had changed") {
		t.Errorf("killed at %s with the archive's runtime active: the recovery says %q", at, msg)
	}
}

// TestKillDuringRestoreAcrossReleasesE2E kills hbx restore of an archive
// written by another release (v2 archive, v1 active) at every journal
// event and, with HBXTEST_KILL_AT, right before and after the rename that
// switches the runtime and the config write that pins the release. After
// each kill the box is on one version (runtime, pin, data) once
// recovered, Executor runs, and the recovery says what it undid: the
// runtime switched back whenever the kill left the archive's runtime
// active.
func TestKillDuringRestoreAcrossReleasesE2E(t *testing.T) {
	requireE2E(t)
	defer holdRecovery(t)() // the next command recovers and says so, not the running supervisor
	b, s, v1, v2, x, preV1 := crossReleaseBox(t)
	back := func(at string) {
		t.Helper()
		if r := b.hbx("restore", preV1); r.code != 0 {
			t.Fatalf("killed at %s: hbx restore of the v1 pre-upgrade archive = %d\n%s", at, r.code, r.stderr)
		}
		oneVersion(t, b, at+", restored v1", v1, v2)
	}

	// Journal events; the next hbx supervise recovers.
	kills := 0
	for k := 0; ; k++ {
		at := killedAt(t, b, k, "restore", x)
		if at == "" {
			break
		}
		kills++
		switched := b.activeVersion() == "2.0.0"
		s = restart(t, b, s)
		ver := oneVersion(t, b, at, v1, v2)
		msg := ""
		for _, l := range strings.Split(readFile(t, s.log), "\n") {
			if strings.Contains(l, "interrupted restore recovered") {
				msg = l
			}
		}
		if ver == "1.0.0" {
			checkRecoveryText(t, at, msg, switched)
		}
		t.Logf("killed at %s (archive's runtime active: %v): on %s after the next hbx supervise; %s", at, switched, ver, msg)
		if ver == "2.0.0" {
			back(at)
		}
	}
	if kills < 6 {
		t.Errorf("only %d kill points", kills)
	}
	if got := oneVersion(t, b, "the end", v1, v2); got != "2.0.0" {
		t.Fatalf("after the uninterrupted restore: on %s, want 2.0.0", got)
	}
	back("the end")

	// Syscall-exact kills; the operator runs hbx restore again while the
	// supervisor runs, which recovers first.
	for _, at := range []string{"runtime-switch-before", "runtime-switch-after", "config-pin-before", "config-pin-after"} {
		r := b.hbxEnv([]string{"HBX_CONFIG=" + b.config, "HBXTEST_KILL_AT=" + at}, "restore", x)
		if r.code != -1 {
			t.Fatalf("hbx restore with HBXTEST_KILL_AT=%s = %d, want killed\n%s", at, r.code, r.stderr)
		}
		switched := b.activeVersion() == "2.0.0"
		r = b.hbx("restore", x, "--json")
		if r.code != 0 {
			t.Fatalf("killed at %s: hbx restore again = %d\n%s", at, r.code, r.stderr)
		}
		msg, _ := lastJSON(t, r.stdout)["recovered"].(string)
		if msg == "" {
			t.Errorf("killed at %s: the next restore reports no recovery", at)
		}
		checkRecoveryText(t, at, msg, switched)
		if got := oneVersion(t, b, at, v1, v2); got != "2.0.0" {
			t.Errorf("killed at %s: after the next restore on %s, want 2.0.0", at, got)
		}
		t.Logf("killed at %s (archive's runtime active: %v): %s", at, switched, msg)
		back(at)
	}

	// A restore killed after the switch (the supervisor refuses Executor
	// on the mismatch: FATAL), then hbx backup: the backup undoes the
	// restore and starts Executor again on v1.
	if r := b.hbxEnv([]string{"HBX_CONFIG=" + b.config, "HBXTEST_KILL_AT=runtime-switch-after"}, "restore", x); r.code != -1 {
		t.Fatalf("hbx restore with HBXTEST_KILL_AT = %d, want killed\n%s", r.code, r.stderr)
	}
	if r := b.hbx("backup"); r.code != 0 {
		t.Fatalf("hbx backup after a restore killed after its runtime switch = %d\n%s", r.code, r.stderr)
	}
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	oneVersion(t, b, "backup after a killed restore", v1, v2)

	// A restore killed after the switch, then hbx upgrade: the restore is
	// undone first, so the upgrade starts from v1 (not "already the
	// active release") and its pre-upgrade archive records v1.
	if r := b.hbxEnv([]string{"HBX_CONFIG=" + b.config, "HBXTEST_KILL_AT=runtime-switch-after"}, "restore", x); r.code != -1 {
		t.Fatalf("hbx restore with HBXTEST_KILL_AT = %d, want killed\n%s", r.code, r.stderr)
	}
	r := b.hbx("upgrade", "--image", v2)
	if r.code != 0 {
		t.Fatalf("hbx upgrade after a restore killed after its runtime switch = %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, v1+" → "+v2) {
		t.Errorf("hbx upgrade after the killed restore did not go from v1 to v2:\n%s", r.stdout)
	}
	if ver, img, st := b.activeVersion(), b.configuredImage(), readState(t, b.dataDir); ver != "2.0.0" || img != v2 || st.Format != 2 {
		t.Errorf("after the upgrade: active %s, configured %s, data format %d; want 2.0.0, v2, 2", ver, img, st.Format)
	}
	if gen := readFile(t, filepath.Join(b.dataDir, "generation")); gen != "v1 data" {
		t.Errorf("after the upgrade: generation %q, want the v1 data migrated", gen)
	}
	_ = s
}

// TestRollbackRecoversInterruptedUpgradeE2E: hbx upgrade killed during
// its activation or health wait, then hbx rollback while the supervisor
// runs: the rollback is the recovery of that upgrade; it says what it
// did and exits 0, and the box is on the old release with the
// pre-upgrade data (issue 12: it rolled back, then printed only "no
// upgrade to roll back: ... already rolled back" and exited 1).
func TestRollbackRecoversInterruptedUpgradeE2E(t *testing.T) {
	requireE2E(t)
	defer holdRecovery(t)() // hbx rollback recovers it, not the running supervisor
	b, _, v1, v2, _ := upgradeBox(t)
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v1 data", 0o600)
	for _, want := range []string{"activating", "health"} {
		at := killedOn(t, b, want, "upgrade", "--image", v2)
		if at != want {
			t.Fatalf("hbx upgrade finished before the event %s", want)
		}
		r := b.hbx("rollback")
		if r.code != 0 {
			t.Fatalf("killed at %s: hbx rollback = %d, want 0\n%s%s", at, r.code, r.stdout, r.stderr)
		}
		t.Logf("killed at %s: hbx rollback: %s", at, strings.TrimSpace(r.stdout))
		if !strings.Contains(r.stdout, "rolled back the interrupted upgrade") || !strings.Contains(r.stdout, "nothing more to roll back") {
			t.Errorf("killed at %s: hbx rollback does not say what it did:\n%s", at, r.stdout)
		}
		onRelease(t, b, "after hbx rollback of the interrupted upgrade", "1.0.0", v1, "v1 data", 1)
		if again := b.hbx("rollback"); again.code == 0 {
			t.Errorf("killed at %s: a second hbx rollback = 0, want a refusal", at)
		}
	}
}

// killedOn runs `hbx ARGS --json` and SIGKILLs it as soon as it printed
// the event named; it returns the event, "" when hbx finished first.
func killedOn(t *testing.T, b *box, event string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"--config", b.config}, append(args, "--json")...)...)
	cmd.Env = cleanEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	at := ""
	for sc.Scan() {
		var ev struct{ Event string }
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == event {
			cmd.Process.Signal(syscall.SIGKILL)
			at = ev.Event
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	cmd.Wait()
	return at
}

// TestRandomKillRestoreAcrossReleasesE2E kills hbx restore of an archive
// written by another release at random times (HBXTEST_KILLS of them, 20
// by default) across the length of an uninterrupted one, and counts how
// many times the next hbx supervise left the box on one version (runtime,
// pin, data) with Executor running and nothing of the restore left beside
// the data directory: all of them, or the test fails.
func TestRandomKillRestoreAcrossReleasesE2E(t *testing.T) {
	requireE2E(t)
	b, s, v1, v2, x, preV1 := crossReleaseBox(t)
	n := 20
	if v, err := strconv.Atoi(os.Getenv("HBXTEST_KILLS")); err == nil && v > 0 {
		n = v
	}
	start := time.Now()
	if r := b.hbx("restore", x); r.code != 0 {
		t.Fatalf("hbx restore = %d\n%s", r.code, r.stderr)
	}
	span := time.Since(start)
	if r := b.hbx("restore", preV1); r.code != 0 {
		t.Fatalf("hbx restore of the v1 pre-upgrade archive = %d\n%s", r.code, r.stderr)
	}
	converged, finished := 0, 0
	for i := range n {
		delay := time.Duration(mrand.Int64N(int64(span) * 6 / 5))
		cmd := exec.Command(binary(t), "--config", b.config, "restore", x)
		cmd.Env = cleanEnv()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
			finished++
		case <-time.After(delay):
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
		}
		if _, err := os.Stat(filepath.Join(b.dataDir, "generation")); err != nil {
			t.Errorf("kill %d after %s: the data directory has no generation file: %v", i, delay, err)
		}
		s = restart(t, b, s)
		ver, img, st := b.activeVersion(), b.configuredImage(), readState(t, b.dataDir)
		gen := readFile(t, filepath.Join(b.dataDir, "generation"))
		one := ver == "1.0.0" && img == v1 && st.Format == 1 && gen == "v1 data" || ver == "2.0.0" && img == v2 && st.Format == 2 && gen == "v2 data"
		left, _ := filepath.Glob(b.dataDir + ".restore*")
		if one && len(left) == 0 {
			converged++
		} else {
			t.Errorf("kill %d after %s: active %s, configured %s, data format %d, generation %q, left %q", i, delay, ver, img, st.Format, gen, left)
		}
		if ver != "1.0.0" {
			if r := b.hbx("restore", preV1); r.code != 0 {
				t.Fatalf("kill %d: hbx restore of the v1 pre-upgrade archive = %d\n%s", i, r.code, r.stderr)
			}
		}
	}
	kept, _ := filepath.Glob(b.dataDir + ".pre-restore-*")
	t.Logf("%d random kills over %s (%d restores finished first): %d converged to one version; %d pre-restore copies kept (backup.keep_pre_restore)", n, span.Round(time.Millisecond), finished, converged, len(kept))
}
