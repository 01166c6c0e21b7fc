package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/internal/lock"
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
