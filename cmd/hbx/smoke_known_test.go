package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/release"
)

// TestSmokeLeavesLiveDataAlone: KNOWN FAULT, not fixed (gated by
// HBXTEST_KNOWN_FAULTS=1). install.smoke_command runs with
// EXECUTOR_DATA_DIR set to the live data directory and without its lock,
// so while the payload runs (it holds the data lock) an `hbx install` of
// a new release runs the smoke command on the payload's data: the issue's
// own example, a wrapper that starts the server whatever its arguments,
// opens Executor's database beside the running Executor (two writers, the
// thing "One writer per data directory" forbids) and competes for its
// port. Either the smoke command gets a scratch data and state directory
// (and port), or it takes the data lock and refuses beside a running
// payload; this test accepts both: nothing appears in the live data
// directory while someone else holds its lock.
func TestSmokeLeavesLiveDataAlone(t *testing.T) {
	if os.Getenv("HBXTEST_KNOWN_FAULTS") != "1" {
		t.Skip("known fault: set HBXTEST_KNOWN_FAULTS=1")
	}
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
	if err := os.WriteFile(filepath.Join(bin, "smoke"), []byte("#!/bin/sh\ntouch \"$EXECUTOR_DATA_DIR/smoke-was-here\"\n"), 0o755); err != nil {
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
	_ = smokeFunc(&cfg, "/usr/bin:/bin")(context.Background(), inst)
	if _, err := os.Stat(filepath.Join(cfg.Executor.DataDir, "smoke-was-here")); err == nil {
		t.Fatal("the smoke command wrote the live data directory while the running payload held its lock")
	}
}
