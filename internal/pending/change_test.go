package pending

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/upgrade"
)

// TestPendingChange: hbx status and hbx health (check release) fail while
// upgrade.json records an unfinished change; an interrupted one (nobody
// holds hbx.lock) names hbx rollback; a finished one passes, and after a
// recovery rolled one back the note names where the data is kept.
func TestPendingChange(t *testing.T) {
	dir := t.TempDir()
	cfg := &config.Config{}
	cfg.Executor.RuntimeDir = filepath.Join(dir, "runtime")
	cfg.Executor.DataDir = filepath.Join(dir, "data")
	if err := os.MkdirAll(cfg.Executor.RuntimeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Change(cfg); err != nil {
		t.Fatalf("Change without journals = %v", err)
	}
	writeJournal := func(j upgrade.Journal) {
		t.Helper()
		b, _ := json.Marshal(j)
		if err := os.WriteFile(filepath.Join(cfg.Executor.RuntimeDir, upgrade.JournalFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	j := upgrade.Journal{Phase: upgrade.PhaseActivating, Old: upgrade.Release{Target: release.Target{Image: "ex:v1@sha256:a"}}, New: upgrade.Release{Target: release.Target{Image: "ex:v2@sha256:b"}}, Updated: time.Now()}
	writeJournal(j)
	// A stale holder record: the process that wrote it is gone.
	if err := os.WriteFile(filepath.Join(cfg.Executor.RuntimeDir, upgrade.LockFile), []byte(`{"pid":2147483000,"command":"hbx upgrade"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Change(cfg)
	var cp *ChangeError
	if !errors.As(err, &cp) {
		t.Fatalf("Change with an interrupted upgrade = %v, want a *ChangeError", err)
	}
	for _, w := range []string{"upgrade to ex:v2@sha256:b interrupted in phase activating", "`hbx rollback`", "hbx supervise", "ex:v1@sha256:a"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Change says %q, want it to say %q", err, w)
		}
	}
	// Held by a live process: in progress.
	lk, err := lock.Acquire(context.Background(), filepath.Join(cfg.Executor.RuntimeDir, upgrade.LockFile), "hbx upgrade", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Change(cfg); err == nil || !strings.Contains(err.Error(), "in progress") {
		t.Errorf("Change with the lock held = %v, want in progress", err)
	}
	lk.Unlock()
	// Recovered: passes, and the note names the kept copy while it exists.
	kept := cfg.Executor.DataDir + ".rolled-back-20260101T000000Z"
	if err := os.MkdirAll(kept, 0o700); err != nil {
		t.Fatal(err)
	}
	j.Phase, j.Recovered, j.KeptAside = upgrade.PhaseRolledBack, true, kept
	writeJournal(j)
	if err := Change(cfg); err != nil {
		t.Errorf("Change after the recovery = %v, want nil", err)
	}
	if note := upgrade.RecoveryNote(cfg.Executor.RuntimeDir); !strings.Contains(note, kept) || !strings.Contains(note, "interrupted upgrade to ex:v2@sha256:b was rolled back") || !strings.Contains(note, "this note goes once that copy is removed") {
		t.Errorf("RecoveryNote = %q, want it to name the interrupted upgrade and %s", note, kept)
	}
	os.Remove(kept)
	if note := upgrade.RecoveryNote(cfg.Executor.RuntimeDir); note != "" {
		t.Errorf("RecoveryNote without the kept copy = %q, want none", note)
	}
}

// TestPendingChangeReusedPID: hbx.lock's holder record outlives a
// holder killed with SIGKILL, and its pid may since name another live
// process. That process does not hold the lock: the change is
// interrupted (and the running supervisor undoes it), not "in progress"
// for ever. A holder that is stopped (SIGSTOP) is named as such, with
// what lets it go on.
func TestPendingChangeReusedPID(t *testing.T) {
	dir := t.TempDir()
	cfg := &config.Config{}
	cfg.Executor.RuntimeDir = filepath.Join(dir, "runtime")
	cfg.Executor.DataDir = filepath.Join(dir, "data")
	if err := os.MkdirAll(cfg.Executor.RuntimeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	j := upgrade.Journal{Phase: upgrade.PhaseActivating, Old: upgrade.Release{Target: release.Target{Image: "ex:v1@sha256:a"}}, New: upgrade.Release{Target: release.Target{Image: "ex:v2@sha256:b"}}, Updated: time.Now()}
	b, _ := json.Marshal(j)
	if err := os.WriteFile(filepath.Join(cfg.Executor.RuntimeDir, upgrade.JournalFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	lockPath := filepath.Join(cfg.Executor.RuntimeDir, upgrade.LockFile)
	start := func(files ...*os.File) *exec.Cmd {
		t.Helper()
		c := exec.Command("sleep", "600")
		c.ExtraFiles = files
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	record := func(pid int) {
		t.Helper()
		if err := os.WriteFile(lockPath, []byte(`{"pid":`+itoa(pid)+`,"command":"hbx upgrade"}`+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The pid now names a sleep that never opened the lock file.
	other := start()
	record(other.Process.Pid)
	err := Change(cfg)
	if err == nil || !strings.Contains(err.Error(), "interrupted in phase activating") {
		t.Errorf("Change with the record naming a live process that does not hold the lock = %v, want interrupted", err)
	}
	if _, held := upgrade.LockHolder(cfg.Executor.RuntimeDir); held {
		t.Errorf("LockHolder: held by pid %d, which never opened %s", other.Process.Pid, lockPath)
	}

	// A holder stopped with SIGSTOP: in progress, and named stopped.
	lk, err := lock.Acquire(context.Background(), lockPath, "hbx upgrade", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock()
	holder := start(lk.File())
	record(holder.Process.Pid)
	if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err = Change(cfg)
		if err != nil && strings.Contains(err.Error(), "is stopped") || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, w := range []string{"in progress", "pid " + itoa(holder.Process.Pid) + " is stopped", "kill -CONT " + itoa(holder.Process.Pid)} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Change with a stopped holder = %v, want it to say %q", err, w)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestPendingChangeAwaitedWhileLocked: data restored without its runtime
// is named by Change (hbx status exits 3) also while another
// command holds the runtime directory's lock (an hbx install, backup or
// export running meanwhile): the data still waits for its runtime.
func TestPendingChangeAwaitedWhileLocked(t *testing.T) {
	dir := t.TempDir()
	cfg := &config.Config{}
	cfg.Executor.RuntimeDir = filepath.Join(dir, "runtime")
	cfg.Executor.DataDir = filepath.Join(dir, "data")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(cfg.Executor.RuntimeDir, 0o755))
	must(os.MkdirAll(cfg.Executor.DataDir, 0o700))
	const image = "ex:v2@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	must(os.WriteFile(cfg.Executor.DataDir+".restore.json", []byte(`{"format":1,"phase":"not-started","started":"2026-12-01T10:00:00Z","pid":1,"archive":"/backups/a.tar.gz","roots":[],"awaiting":{"image":"`+image+`"}}`), 0o600))
	if err := Change(cfg); err == nil || !strings.Contains(err.Error(), image) {
		t.Fatalf("Change on data awaiting its runtime = %v, want it named", err)
	}
	lk, err := lock.Acquire(context.Background(), filepath.Join(cfg.Executor.RuntimeDir, upgrade.LockFile), "hbx backup", 0, nil)
	must(err)
	defer lk.Unlock()
	var cp *ChangeError
	if err := Change(cfg); !errors.As(err, &cp) || !strings.Contains(err.Error(), image) {
		t.Errorf("Change on data awaiting its runtime, the lock held = %v; want a *ChangeError naming %s", err, image)
	}
}
