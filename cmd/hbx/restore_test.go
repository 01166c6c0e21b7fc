package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/backup"
)

// TestRestoreCommand: the command line restore hints repeat is the one
// given, every flag but --accept-image and --without-runtime kept, each
// word quoted for a shell, so a hint runs as printed.
func TestRestoreCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"restore", "/srv/b/x.tar.gz"}, "hbx restore /srv/b/x.tar.gz"},
		{[]string{"restore", "my backup.tgz", "--data-only", "--config", "/etc/h x.yaml", "--accept-image", "a:b@sha256:00", "--without-runtime"},
			"hbx restore 'my backup.tgz' --config '/etc/h x.yaml' --data-only"},
	} {
		g := &globals{stdout: io.Discard, stderr: io.Discard}
		root := newRootCommand(g)
		cmd, rest, err := root.Find(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Fatal(err)
		}
		if got := restoreCommand(cmd, cmd.Flags().Arg(0)); got != tc.want {
			t.Errorf("restoreCommand(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestRestoreAcceptImageMalformed: an --accept-image that is not a full
// pinned reference is a usage error (exit 2) naming the form wanted,
// before the archive is read; one well-formed but not the archive's image
// is a refusal (backup.ErrImageRefused, exit 1: TestRestoreArchiveRelease).
func TestRestoreAcceptImageMalformed(t *testing.T) {
	cfg := writeConfig(t, "")
	archive := filepath.Join(t.TempDir(), "absent.tar.gz")
	for _, ref := range []string{"registry.example/x:1.2", "registry.example/x@sha256:" + strings.Repeat("a", 64), "1.2"} {
		_, _, code, err := runTest(t, nil, "restore", archive, "--accept-image", ref, "--config", cfg)
		want := "restore: --accept-image " + ref + ": want the full pinned image reference NAME:TAG@sha256:DIGEST"
		if code != exitUsage || err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("hbx restore --accept-image %s = %d, %v; want exit 2 starting %q", ref, code, err, want)
		}
	}
	if code := exitCode(fmt.Errorf("restore x: %w: --accept-image a is not the archive's image b", backup.ErrImageRefused)); code != exitFailure {
		t.Errorf("exitCode(a refused image) = %d, want %d", code, exitFailure)
	}
}

// TestBadPathArgumentsChangeNothing: an archive or --from path that is
// missing or of the wrong type is a usage error (exit 2) naming the path
// once, given before any directory of the box is created (and before
// executor.user would be).
func TestBadPathArgumentsChangeNothing(t *testing.T) {
	box := t.TempDir()
	runtimeDir, dataDir := filepath.Join(box, "runtime"), filepath.Join(box, "data")
	backupDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(backupDir, "kept.tar.gz.gpg"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, "executor:\n  runtime_dir: "+runtimeDir+"\n  data_dir: "+dataDir+"\n  state_dir: "+filepath.Join(box, "state")+"\nbackup:\n  dir: "+backupDir+"\n")
	archive := filepath.Join(t.TempDir(), "b.tar.gz")
	if err := os.WriteFile(archive, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing, dir := filepath.Join(t.TempDir(), "missing"), t.TempDir()
	pin := []string{"--image", "127.0.0.1:5000/x:v2@sha256:" + strings.Repeat("a", 64), "--platform-digest", "sha256:" + strings.Repeat("b", 64)}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"restore", missing}, "restore " + missing + ": open archive: no such file or directory (hbx backup list shows the archives in backup.dir " + backupDir + ")"},
		{[]string{"restore", dir}, "restore " + dir + ": archive is a directory: not a regular file"},
		{[]string{"restore", archive, "--from", missing}, "restore: --from: local image " + missing + ": not usable: it does not exist"},
		{[]string{"backup", "verify", missing}, "backup verify: " + missing + ": open archive: no such file or directory (hbx backup list shows the archives in backup.dir " + backupDir + ")"},
		{[]string{"restore", "kept.tar.gz.gpg"}, "restore kept.tar.gz.gpg: open archive: no such file or directory (did you mean " + filepath.Join(backupDir, "kept.tar.gz.gpg") + "? relative names are read from the working directory)"},
		{[]string{"install", "--from", missing}, "install: --from: local image " + missing + ": not usable: it does not exist"},
		{append([]string{"upgrade", "--from", missing}, pin...), "upgrade: --from: local image " + missing + ": not usable: it does not exist"},
	} {
		_, _, code, err := runTest(t, nil, append(tt.args, "--config", cfg)...)
		if code != exitUsage || err == nil || err.Error() != tt.want {
			t.Errorf("hbx %q = %v (exit %d), want %q (exit %d)", tt.args, err, code, tt.want, exitUsage)
		}
	}
	if entries, err := os.ReadDir(box); err != nil || len(entries) != 0 {
		t.Errorf("the box's directory holds %v (%v) after refused commands, want nothing", entries, err)
	}
}
