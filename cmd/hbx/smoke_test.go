package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/release"
)

// TestSmokeLeavesLiveDataAlone: install.smoke_command used to run with
// EXECUTOR_DATA_DIR set to the live data directory and without its lock,
// so while the payload runs (it holds the data lock) an `hbx install` of
// a new release ran the smoke command on the payload's data: the issue's
// own example, a wrapper that starts the server whatever its arguments,
// opened Executor's database beside the running Executor (two writers,
// what "One writer per data directory" forbids) and competed for its
// port. It now gets a scratch data and state directory and a free port:
// the command runs, and nothing appears in the live data directory.
func TestSmokeLeavesLiveDataAlone(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Defaults()
	cfg.Executor.RuntimeDir = filepath.Join(dir, "runtime")
	cfg.Executor.DataDir = filepath.Join(dir, "workspace/data")
	cfg.Executor.StateDir = filepath.Join(dir, "state")
	cfg.Executor.User = ""
	cfg.Install.SmokeCommand = []string{"smoke"}
	rel := filepath.Join(dir, "release")
	bin := filepath.Join(rel, release.RootfsDir, "usr/local/bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "smoke"), []byte("#!/bin/sh\ntouch \"$EXECUTOR_DATA_DIR/smoke-was-here\" && echo \"$EXECUTOR_DATA_DIR $PORT\" > "+filepath.Join(dir, "seen")+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	inst := &release.Installed{Dir: rel, Meta: release.Meta{Config: release.ImageConfig{
		Cmd: []string{"smoke"}, WorkingDir: "/", Env: []string{"PATH=/usr/local/bin"},
	}}}
	// The running payload's lock.
	l, err := datalock.Acquire(context.Background(), cfg.Executor.DataDir, datalock.Options{Command: "hbx run executor (test)"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if err := smokeFunc(&cfg, "/usr/bin:/bin")(context.Background(), inst); err != nil {
		t.Fatalf("smoke command: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Executor.DataDir, "smoke-was-here")); err == nil {
		t.Fatal("the smoke command wrote the live data directory while the running payload held its lock")
	}
	seen, err := os.ReadFile(filepath.Join(dir, "seen"))
	if err != nil {
		t.Fatalf("the smoke command did not run: %v", err)
	}
	var data string
	var port int
	if _, err := fmt.Sscan(string(seen), &data, &port); err != nil || data == cfg.Executor.DataDir || port == cfg.Executor.Port {
		t.Errorf("smoke command saw EXECUTOR_DATA_DIR PORT = %q; want a scratch directory and another port than %d", seen, cfg.Executor.Port)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("scratch data directory %s left after the smoke command: %v", data, err)
	}
}
