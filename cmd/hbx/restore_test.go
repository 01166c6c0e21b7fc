package main

import (
	"io"
	"testing"
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
