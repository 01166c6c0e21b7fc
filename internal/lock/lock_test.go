package lock

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
)

func TestAcquireNamesHolder(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hbx.lock")
	l, err := Acquire(context.Background(), p, "hbx install", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks are per open file description: a second open in this
	// process conflicts like another process would.
	_, err = Acquire(context.Background(), p, "hbx backup", 100*time.Millisecond, nil)
	var held *HeldError
	if !errors.As(err, &held) || !IsLocked(err) {
		t.Fatalf("second Acquire() = %v, want a HeldError", err)
	}
	if held.Holder.PID != os.Getpid() || held.Holder.Command != "hbx install" {
		t.Errorf("holder = %+v, want pid %d command %q", held.Holder, os.Getpid(), "hbx install")
	}
	if !strings.Contains(err.Error(), "hbx install") {
		t.Errorf("error %q does not name the holder", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(context.Background(), p, "hbx backup", 0, nil)
	if err != nil {
		t.Fatalf("Acquire after Unlock = %v", err)
	}
	l2.Unlock()
}

func TestReleasedWhenHolderDies(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		testenv.Missing(t, "flock(1) is not installed (apt-get install util-linux)")
	}
	p := filepath.Join(t.TempDir(), "hbx.lock")
	cmd := exec.Command(flock, "--no-fork", p, "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := Acquire(context.Background(), p, "probe", 0, nil)
		if err != nil {
			break
		}
		l.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("flock(1) never took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	waited := false
	done := make(chan error, 1)
	go func() {
		l, err := Acquire(context.Background(), p, "waiter", 10*time.Second, func(Holder) { waited = true })
		if err == nil {
			l.Unlock()
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cmd.Process.Kill()
	cmd.Wait()
	if err := <-done; err != nil {
		t.Fatalf("Acquire after holder was killed = %v", err)
	}
	if !waited {
		t.Error("onWait was not called while the lock was held")
	}
}

func TestWithHeld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "hbx.lock")
	l, err := Acquire(context.Background(), p, "hbx restore", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	ctx := WithHeld(context.Background(), l)
	nested, err := Acquire(ctx, p, "hbx install", 0, nil)
	if err != nil {
		t.Fatalf("Acquire under WithHeld = %v, want a nested lock", err)
	}
	if err := nested.Unlock(); err != nil {
		t.Fatalf("nested Unlock() = %v", err)
	}
	// The outer lock is still held: another Acquire without the context fails.
	if _, err := Acquire(context.Background(), p, "other", 0, nil); !IsLocked(err) {
		t.Errorf("Acquire after the nested Unlock = %v, want ErrLocked", err)
	}
	// Another file is not affected.
	other, err := Acquire(ctx, filepath.Join(dir, "other.lock"), "x", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if other.f == nil {
		t.Errorf("Acquire of another file under WithHeld returned a nested lock")
	}
	other.Unlock()
}

// TestWithHeldNested: a context made from a nested lock still says the
// lock is held, so three levels (upgrade → restore → install) nest.
func TestWithHeldNested(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hbx.lock")
	l, err := Acquire(context.Background(), p, "hbx upgrade", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	nested, err := Acquire(WithHeld(context.Background(), l), p, "hbx restore", 0, nil)
	if err != nil {
		t.Fatalf("Acquire under WithHeld = %v", err)
	}
	inner, err := Acquire(WithHeld(context.Background(), nested), p, "hbx install", 0, nil)
	if err != nil {
		t.Fatalf("Acquire under WithHeld(nested) = %v, want a nested lock", err)
	}
	if err := inner.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := nested.Unlock(); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(context.Background(), p, "other", 0, nil); !IsLocked(err) {
		t.Errorf("Acquire after the nested Unlocks = %v, want ErrLocked", err)
	}
}
