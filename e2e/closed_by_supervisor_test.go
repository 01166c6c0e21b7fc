package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/upgrade"
)

// TestRollbackAfterTheSupervisorClosedAKilledUpgradeE2E: after a
// completed upgrade 1.0.0 -> 2.0.0, an upgrade killed (kill -9) during
// its pre-upgrade backup, before activation, is closed by the running
// supervisor about a second later, which puts 2.0.0's journal back. The
// operator's hbx rollback then must not undo 1.0.0 -> 2.0.0 as well (had
// it come first, it would have been the closing, exit 0, nothing undone):
// it refuses, naming the closed change and the archive that goes back
// past 2.0.0, and the box stays on 2.0.0 with its data. Before, it
// restored 1.0.0 and the archive made before 2.0.0 over the data written
// since.
func TestRollbackAfterTheSupervisorClosedAKilledUpgradeE2E(t *testing.T) {
	requireE2E(t)
	b, _, _, v2, sick := upgradeBox(t)
	if r := b.hbx("upgrade", "--image", v2); r.code != 0 {
		t.Fatalf("hbx upgrade to 2.0.0 = %d\n%s", r.code, r.stderr)
	}
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v2 data", 0o600)
	if at := killedOn(t, b, "backing-up", "upgrade", "--no-rehearsal", "--image", sick); at == "" {
		t.Fatal("hbx upgrade to 2.0.0-sick finished before its pre-upgrade backup")
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		j, err := upgrade.ReadJournal(b.runtimeDir)
		if err == nil && j != nil && j.Phase == upgrade.PhaseDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running supervisor did not close the killed upgrade within 2 minutes: journal %+v, %v", j, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitConverged(t, b, "after the supervisor closed the killed upgrade", 2*time.Minute)
	r := b.hbx("rollback")
	t.Logf("hbx rollback = %d: %s%s", r.code, r.stdout, r.stderr)
	if r.code == 0 || !strings.Contains(r.stderr, "closed by the recovery") || !strings.Contains(r.stderr, "hbx restore ") {
		t.Errorf("hbx rollback after the supervisor closed the killed upgrade = %d, want a refusal naming the closed change and the archive", r.code)
	}
	if got, gen := b.activeVersion(), readFile(t, filepath.Join(b.dataDir, "generation")); got != "2.0.0" || gen != "v2 data" {
		t.Errorf("after hbx rollback: active %s, generation %q; want 2.0.0 with the v2 data", got, gen)
	}
}
