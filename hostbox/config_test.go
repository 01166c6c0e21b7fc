// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestEditorCommand: $VISUAL wins over $EDITOR, vi is the default, and a
// value with arguments runs through sh with the path as one argument.
func TestEditorCommand(t *testing.T) {
	for _, tc := range []struct {
		name, visual, editor, want string
	}{
		{"default", "", "", `vi "$1"`},
		{"editor", "", "nano", `nano "$1"`},
		{"visual wins", "code --wait", "nano", `code --wait "$1"`},
		{"blank visual", "  ", "ed", `ed "$1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"VISUAL": tc.visual, "EDITOR": tc.editor}
			got := EditorCommand(func(k string) string { return env[k] }, "/tmp/a b/hbx.yaml")
			want := []string{"sh", "-c", tc.want, "sh", "/tmp/a b/hbx.yaml"}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("EditorCommand (-got +want):\n%s", diff)
			}
		})
	}
}

// TestEditCopy: the editor works on a private copy; what it leaves is
// returned, a failing editor is an error, and the copy is gone after.
func TestEditCopy(t *testing.T) {
	old := []byte("executor:\n  port: 4788\n")
	var seen string
	sed := func(expr string) func(string) error {
		return func(p string) error {
			seen = p
			st, err := os.Stat(filepath.Dir(p))
			if err != nil || st.Mode().Perm() != 0o700 {
				t.Errorf("editor's directory %s: %v %v, want mode 0700", filepath.Dir(p), st, err)
			}
			argv := EditorCommand(func(k string) string {
				if k == "EDITOR" {
					return "sed -i " + expr
				}
				return ""
			}, p)
			return exec.Command(argv[0], argv[1:]...).Run()
		}
	}
	got, err := editCopy(old, sed("s/4788/4789/"))
	if err != nil || string(got) != "executor:\n  port: 4789\n" {
		t.Errorf("editCopy(sed) = %q, %v", got, err)
	}
	if _, err := os.Stat(seen); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the edited copy %s is left: %v", seen, err)
	}
	got, err = editCopy(old, sed("s/nothing/else/"))
	if err != nil || string(got) != string(old) {
		t.Errorf("editCopy(no change) = %q, %v; want the old bytes", got, err)
	}
	if _, err := editCopy(old, func(string) error { return exec.Command("false").Run() }); err == nil {
		t.Error("editCopy(failing editor) = nil error")
	}
}
