package main

import (
	"context"
	"crypto/rand"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/upgrade"
)

// TestPreUpgradeBackupFails: the pre-upgrade backup (the upgrade holds the
// programs; the backup runs through backup.Create with box.heldServices) that
// fails after the data was scanned, here because a file changes while it
// is archived (a writer that escaped the hold), returns one error line,
// leaves no archive and no temporary file, and does not panic (it did:
// the deferred restart read the nil result).
func TestPreUpgradeBackupFails(t *testing.T) {
	cfgPath, root := backupBox(t, 0o600)
	cfg, _, err := config.Load(config.LoadOptions{Path: cfgPath, PathExplicit: true})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 48<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(root, "data", "big"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	grow := filepath.Join(root, "data", "grow")
	// It exists before the backup lists the directory, however late the
	// writer starts on a loaded machine.
	if err := os.WriteFile(grow, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The writer appends from this process (the busy check leaves its own
	// process out, so it never sees the writer and the file must change
	// under the archiver).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if f, err := os.OpenFile(grow, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				f.WriteString("x")
				f.Close()
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	d := (&globals{log: slog.New(slog.DiscardHandler)}).box(cfg, nil).UpgradeOptions().Data
	_, err = d.Backup(context.Background(), upgrade.Release{Target: release.Target{Image: cfg.Executor.Image, Platform: cfg.Executor.Platform}}, "")
	// The change is seen while hashing or while writing (then the partial
	// archive is removed); both are after the hold.
	if err == nil || !strings.Contains(err.Error(), "changed while being archived") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("pre-upgrade Backup() = %v, want one line: a file changed", err)
	}
	ents, _ := os.ReadDir(cfg.Backup.Dir)
	for _, e := range ents {
		t.Errorf("left in the backup directory: %s", e.Name())
	}
}
