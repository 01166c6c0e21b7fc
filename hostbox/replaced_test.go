// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestKeepReplacedRefusesBeforeSaving: load --force does not replace a box
// whose save would land in the box root (rm of a box deletes what is in
// it) or whose backup.pass cannot be read; both are refused before any
// Docker call, and no passphrase file is left.
func TestKeepReplacedRefusesBeforeSaving(t *testing.T) {
	root := t.TempDir()
	writeTestBox(t, root, "alice", "BOX=alice\nHOST_PORT=4789\n")
	outside := t.TempDir()
	for name, tc := range map[string]struct {
		archive string
		pass    string // backup.pass content; "" writes none
		want    error
	}{
		"archive in the box root": {filepath.Join(root, "a.box.tar.gz.gpg"), "secret\n", ErrInvalid},
		"no backup.pass":          {filepath.Join(outside, "a.box.tar.gz.gpg"), "", ErrInvalid},
	} {
		t.Run(name, func(t *testing.T) {
			passFile := filepath.Join(root, "alice", PassFile)
			os.Remove(passFile)
			if tc.pass != "" {
				if err := os.WriteFile(passFile, []byte(tc.pass), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			o := LoadOptions{NewOptions: NewOptions{Root: root, Name: "alice"}, Archive: tc.archive, Force: true}
			b, err := Open(root, "alice")
			if err != nil {
				t.Fatal(err)
			}
			out, err := Docker{}.keepReplaced(context.Background(), o, b, time.Now())
			if !errors.Is(err, tc.want) || out != "" {
				t.Fatalf("keepReplaced = %q, %v; want a refusal wrapping %v", out, err, tc.want)
			}
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(tc.archive), "alice-replaced-*"))
			if len(left) != 0 {
				t.Errorf("a refused keepReplaced left %v", left)
			}
			if _, err := Open(root, "alice"); err != nil {
				t.Errorf("the box after a refusal: %v", err)
			}
		})
	}
}
