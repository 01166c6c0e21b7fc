package datadir_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/datalock"
)

// TestNames: each name beside a data directory has the shape the package
// doc, the docs and operators' scripts give.
func TestNames(t *testing.T) {
	const d = "/workspace/executor/data"
	for _, tc := range []struct{ name, got, want string }{
		{"Lock", datadir.Lock(d), "/workspace/executor/.data.lock"},
		{"Lock(trailing slash)", datadir.Lock(d + "/"), "/workspace/executor/.data.lock"},
		{"RehearsalLock", datadir.RehearsalLock(d + "/"), "/workspace/executor/.data.rehearsal.lock"},
		{"SupervisorState", datadir.SupervisorState(d), "/workspace/executor/.data.supervisor"},
		{"SupervisorState(trailing slash)", datadir.SupervisorState(d + "/"), "/workspace/executor/.data.supervisor"},
		{"LockOwner", datadir.LockOwner(d), "/workspace/executor/.data.lock.owner"},
		{"Journal", datadir.Journal(d), "/workspace/executor/data.restore.json"},
		{"Staging", datadir.Staging.Path(d, "20261201T101500Z"), "/workspace/executor/data.restore-20261201T101500Z"},
		{"PreRestore", datadir.PreRestore.Path(d, "20261201T101500Z-1"), "/workspace/executor/data.pre-restore-20261201T101500Z-1"},
		{"RolledBack", datadir.RolledBack.Path(d, "20261201T101500Z"), "/workspace/executor/data.rolled-back-20261201T101500Z"},
		{"Stamp", datadir.Stamp(time.Date(2026, 12, 1, 11, 15, 0, 0, time.FixedZone("CET", 3600))), "20261201T101500Z"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

// TestKindOf: names are told apart by kind and by the directory they sit
// beside, and only stamps that parse are kept copies.
func TestKindOf(t *testing.T) {
	want := time.Date(2026, 12, 1, 10, 15, 0, 0, time.UTC)
	for _, tc := range []struct {
		kind    datadir.Kind
		name    string
		of      bool
		created bool
		left    bool
	}{
		{datadir.PreRestore, "data.pre-restore-20261201T101500Z", true, true, true},
		{datadir.PreRestore, "data.pre-restore-20261201T101500Z-2", true, true, true},
		{datadir.PreRestore, "data.pre-restore-junk", true, false, true},
		{datadir.PreRestore, "database.pre-restore-20261201T101500Z", false, false, false},
		{datadir.PreRestore, "data.rolled-back-20261201T101500Z", false, false, false},
		{datadir.RolledBack, "data.rolled-back-20261201T101500Z", true, true, false},
		{datadir.Staging, "data.restore-20261201T101500Z", true, true, true},
		{datadir.Staging, "data.restore.json", false, false, true},
		{datadir.Staging, "data", false, false, false},
	} {
		if got := tc.kind.Of("data", tc.name); got != tc.of {
			t.Errorf("%s.Of(data, %q) = %v, want %v", tc.kind, tc.name, got, tc.of)
		}
		got, ok := tc.kind.Created("data", tc.name)
		if ok != tc.created || ok && !got.Equal(want) {
			t.Errorf("%s.Created(data, %q) = %v, %v, want %v", tc.kind, tc.name, got, ok, tc.created)
		}
		if got := datadir.LeftByRestore("data", tc.name); got != tc.left {
			t.Errorf("LeftByRestore(data, %q) = %v, want %v", tc.name, got, tc.left)
		}
	}
}

// TestLockNamesOnDisk: the files internal/datalock creates are the ones
// Lock and LockOwner name, and the data directory holds neither.
func TestLockNamesOnDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := datalock.Acquire(context.Background(), dir, datalock.Options{Command: "datadir test"})
	if err != nil {
		t.Fatalf("datalock.Acquire = %v", err)
	}
	defer l.Release()
	for _, p := range []string{datadir.Lock(dir), datadir.LockOwner(dir)} {
		if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("after datalock.Acquire, %s: %v, want a regular file", p, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("data directory holds %d entries after Acquire, want 0", len(ents))
	}
}
