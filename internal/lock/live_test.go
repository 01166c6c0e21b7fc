package lock

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestLiveHolder: the lock is held by a live process only while one has
// the lock file open: not without a record, not by a record naming a dead
// pid or a live process that never opened the file (a reused pid), and
// yes by this process holding it.
func TestLiveHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hbx.lock")
	if _, held := LiveHolder(path); held {
		t.Errorf("held without a lock file")
	}
	record := func(pid int) {
		t.Helper()
		if err := os.WriteFile(path, []byte(`{"pid":`+strconv.Itoa(pid)+`,"command":"hbx upgrade"}`+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	record(dead.Process.Pid)
	if h, held := LiveHolder(path); held || h.PID != dead.Process.Pid {
		t.Errorf("record of the exited pid %d: %+v held %v, want the record, not held", dead.Process.Pid, h, held)
	}
	other := exec.Command("sleep", "600")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	record(other.Process.Pid)
	if _, held := LiveHolder(path); held {
		t.Errorf("held by pid %d, a live process that never opened %s", other.Process.Pid, path)
	}
	lk, err := Acquire(context.Background(), path, "hbx upgrade", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock()
	if h, held := LiveHolder(path); !held || h.PID != os.Getpid() || h.Command != "hbx upgrade" {
		t.Errorf("while this process holds it: %+v held %v, want pid %d holding", h, held, os.Getpid())
	}
}
