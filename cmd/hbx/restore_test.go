package main

import (
	"fmt"
	"io"
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
