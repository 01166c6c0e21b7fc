package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/supervisor"
)

// TestExplainSaysNoConfigFileAndHowToWait: an error of a command that
// read no config file names that (a forgotten --config reads as a broken
// box); a lock another command holds says how to wait for it; an error
// of a command that read its file is left as it is, and so is another
// lock than the runtime directory's (a second supervisor, a box).
func TestExplainSaysNoConfigFileAndHowToWait(t *testing.T) {
	absent := config.File{Path: "/etc/hbx/hbx.yaml"}
	read := config.File{Path: "/etc/hbx/hbx.yaml", Read: true}
	held := &lock.HeldError{Path: "/rt/hbx.lock", Holder: lock.Holder{PID: 9, Command: "hbx backup", Since: time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)}}
	const wait = "; wait for it to end, or let the command wait (install.lock_wait for hbx install and export, backup.lock_wait for the others)"
	for _, tt := range []struct {
		name string
		file config.File
		err  error
		want string
	}{
		{"no file", absent, errors.New("health: failed: release"), "health: failed: release [no config file (/etc/hbx/hbx.yaml is absent), defaults]"},
		{"file read", read, errors.New("health: failed: release"), "health: failed: release"},
		{"lock held", read, fmt.Errorf("backup: %w", held), "backup: /rt/hbx.lock is held by pid 9 (hbx backup) since 2026-12-03T07:00:00Z" + wait},
		{"another supervisor", read, fmt.Errorf("%w: %w", supervisor.ErrAlreadyRunning, &lock.HeldError{Path: "/var/lib/hbx/supervisor.lock", Holder: held.Holder}),
			"another supervisor is running: /var/lib/hbx/supervisor.lock is held by pid 9 (hbx backup) since 2026-12-03T07:00:00Z"},
		{"a box's lock", read, fmt.Errorf("box b1: %w", &lock.HeldError{Path: "/srv/boxes/b1/box.lock", Holder: held.Holder}),
			"box b1: /srv/boxes/b1/box.lock is held by pid 9 (hbx backup) since 2026-12-03T07:00:00Z"},
		{"lock held, no file", absent, fmt.Errorf("backup: %w", held), "backup: /rt/hbx.lock is held by pid 9 (hbx backup) since 2026-12-03T07:00:00Z" + wait + " [no config file (/etc/hbx/hbx.yaml is absent), defaults]"},
	} {
		g := &globals{configFile: &tt.file}
		got := g.explain(tt.err)
		if got == nil || got.Error() != tt.want || !errors.Is(got, tt.err) {
			t.Errorf("%s: explain(%v) = %v, want %q wrapping it", tt.name, tt.err, got, tt.want)
		}
	}
	if got := (&globals{configFile: &absent}).explain(nil); got != nil {
		t.Errorf("explain(nil) = %v, want nil", got)
	}
}

// TestBackupListSaysNoConfigFile: hbx backup list run without a config
// file says so on stderr beside the (here empty) list, which would
// otherwise read as "no backups".
func TestBackupListSaysNoConfigFile(t *testing.T) {
	dir := t.TempDir()
	env := []string{"HBX_CONFIG=", "HBX_BACKUP_DIR=" + dir, "HBX_EXECUTOR_DATA_DIR=" + filepath.Join(dir, "data")}
	if _, err := os.Stat("/etc/hbx/hbx.yaml"); err == nil {
		t.Fatalf("/etc/hbx/hbx.yaml exists on this machine: this test runs hbx with no config file")
	}
	var out, errOut strings.Builder
	if err := runEnv(t.Context(), []string{"backup", "list"}, env, &out, &errOut); err != nil {
		t.Fatalf("hbx backup list with no config file = %v", err)
	}
	if want := "hbx: note: no config file (/etc/hbx/hbx.yaml is absent), defaults: listing backup.dir " + dir + "\n"; !strings.Contains(errOut.String(), want) {
		t.Errorf("hbx backup list without a config file: stderr %q, want %q", errOut.String(), want)
	}
}
