// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/lock"
)

// TestOperationsOnABusyBoxAreRefused: while another holder has the box's
// .lock, every operation that changes the box is refused at once, naming
// the lock, and changes nothing (docker is never run: it does not exist).
func TestOperationsOnABusyBoxAreRefused(t *testing.T) {
	root := t.TempDir()
	writeTestBox(t, root, "alice", "BOX=alice\nHOST_PORT=4788\n")
	b, err := Open(root, "alice")
	if err != nil {
		t.Fatal(err)
	}
	held, err := lock.Acquire(context.Background(), b.Path(LockFile), "test", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock()
	d := Docker{Program: filepath.Join(root, "no-docker")}
	ctx := context.Background()
	for name, op := range map[string]func() error{
		"stop":   func() error { _, err := d.Stop(ctx, root, "alice"); return err },
		"start":  func() error { _, err := d.Start(ctx, root, "alice", time.Minute); return err },
		"rm":     func() error { _, err := d.Remove(ctx, root, "alice"); return err },
		"rotate": func() error { _, err := d.RotateToken(ctx, root, "alice", time.Minute); return err },
	} {
		if err := op(); !lock.IsLocked(err) {
			t.Errorf("%s on a busy box = %v, want a lock.HeldError", name, err)
		}
	}
	if _, err := os.Stat(b.Path(EnvFile)); err != nil {
		t.Errorf("the busy box changed: %v", err)
	}
}

// TestOperationsOnAMissingBoxSayNoSuchBox: no lock file is created for
// a box that does not exist.
func TestOperationsOnAMissingBoxSayNoSuchBox(t *testing.T) {
	root := t.TempDir()
	d := Docker{Program: filepath.Join(root, "no-docker")}
	if _, err := d.Stop(context.Background(), root, "ghost"); err == nil {
		t.Fatal("stop of a missing box: want an error")
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("stop of a missing box left %d entries in the root", len(ents))
	}
}
