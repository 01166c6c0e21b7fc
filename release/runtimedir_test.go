package release

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/testenv"
)

// TestLockRuntime: LockRuntime creates the runtime directory, takes
// hbx.lock in it, and a second taker is refused naming the first, or
// waits, logging the holder once, and gets the lock when it is released.
func TestLockRuntime(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "runtime")
	ctx := context.Background()
	first, err := LockRuntime(ctx, dir, "hbx first", 0, nil)
	if err != nil {
		t.Fatalf("LockRuntime(%s) = %v, want the lock", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, LockFile)); err != nil {
		t.Fatalf("lock file after LockRuntime: %v", err)
	}
	_, err = LockRuntime(ctx, dir, "hbx second", 0, nil)
	var held *lock.HeldError
	if !errors.As(err, &held) || !strings.Contains(err.Error(), "hbx first") {
		t.Fatalf("second LockRuntime(wait 0) = %v, want a *lock.HeldError naming hbx first", err)
	}
	var logs testenv.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	go func() {
		// Released only once the waiter has logged the holder (or late).
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(logs.String(), "waiting") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		first.Unlock()
	}()
	second, err := LockRuntime(ctx, dir, "hbx second", time.Minute, log)
	if err != nil {
		t.Fatalf("LockRuntime(wait 1m) = %v, want the lock once released", err)
	}
	defer second.Unlock()
	if got := logs.String(); strings.Count(got, "waiting for the runtime directory's lock") != 1 || !strings.Contains(got, "hbx first") {
		t.Errorf("log while waiting = %q, want one line naming the holder hbx first", got)
	}
}

// TestLockRuntimeBadDir: a runtime directory that cannot be created is an
// error naming the step, and no lock is taken.
func TestLockRuntimeBadDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LockRuntime(context.Background(), filepath.Join(file, "runtime"), "hbx test", 0, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "create runtime directory: ") {
		t.Errorf("LockRuntime(under a file) = %v, want create runtime directory: ...", err)
	}
}
