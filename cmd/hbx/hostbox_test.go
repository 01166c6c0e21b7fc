package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostboxBadInputExitsTwoCreatingNothing: hbx box's refusals of bad
// input (and of an unknown box) are one line and exit 2, and leave the
// root as it was (here: absent). None of them reaches docker.
func TestHostboxBadInputExitsTwoCreatingNothing(t *testing.T) {
	root := filepath.Join(t.TempDir(), "boxes")
	secrets := t.TempDir()
	pass, loose := filepath.Join(secrets, "pass"), filepath.Join(secrets, "loose")
	os.WriteFile(pass, []byte("p\n"), 0o600)
	os.WriteFile(loose, []byte("p\n"), 0o644)
	os.Chmod(loose, 0o644)
	env := []string{"HBX_BOX_ROOT=" + root, "PATH=" + filepath.Join(t.TempDir(), "no-docker-here")}
	for name, args := range map[string][]string{
		"bad name":        {"box", "new", "Bad_Name", "--agent-image", "a"},
		"no agent image":  {"box", "new", "alice"},
		"bad --set":       {"box", "new", "alice", "--agent-image", "a", "--set", "lower=x"},
		"port range":      {"box", "new", "alice", "--agent-image", "a", "--port", "70000"},
		"unknown box":     {"box", "doctor", "nobody"},
		"stop unknown":    {"box", "stop", "nobody"},
		"load no pass":    {"box", "load", "alice", filepath.Join(secrets, "a.gpg"), "--passphrase-file", filepath.Join(secrets, "missing")},
		"load loose pass": {"box", "load", "alice", filepath.Join(secrets, "a.gpg"), "--passphrase-file", loose},
		"load no archive": {"box", "load", "alice", filepath.Join(secrets, "a.gpg"), "--passphrase-file", pass},
		"unknown command": {"box", "frob"},
	} {
		var out, errb bytes.Buffer
		err := runEnv(context.Background(), args, env, &out, &errb)
		want := exitUsage
		if name == "load no archive" {
			want = exitFailure
		}
		if got := exitCode(err); got != want || err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: exit %d (%v), want %d and one line", name, got, err, want)
		}
		if _, serr := os.Lstat(root); serr == nil {
			t.Fatalf("%s: the root %s exists", name, root)
		}
	}
}
