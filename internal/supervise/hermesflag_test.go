package supervise

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/supervisor"
)

// TestExternalSupervisorFlag: --external-supervisor is added to a
// `gateway run` command only when the installed Hermes's `gateway run
// --help` names it; an older one, a failing probe, a command that has it
// already or runs something else are left alone.
func TestExternalSupervisorFlag(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newer := script("hermes-new", `[ "$1 $2 $3" = "gateway run --help" ] && [ "$HERMES_HOME" = /hh ] && echo "  --replace  replace a running gateway" && echo "  --external-supervisor  exit 75 on /restart"; exit 0`)
	older := script("hermes-old", `echo "  --replace  replace a running gateway"`)
	broken := script("hermes-broken", `echo "Traceback: no module named hermes" >&2; exit 1`)
	for _, tc := range []struct {
		name    string
		command []string
		want    []string
		log     string
	}{
		{"newer release", []string{newer, "gateway", "run", "--replace"}, []string{newer, "gateway", "run", "--replace", "--external-supervisor"}, "added"},
		{"older release", []string{older, "gateway", "run", "--replace"}, []string{older, "gateway", "run", "--replace"}, "older release"},
		{"probe fails", []string{broken, "gateway", "run"}, []string{broken, "gateway", "run"}, "exit status 1"},
		{"not installed", []string{filepath.Join(dir, "none"), "gateway", "run"}, []string{filepath.Join(dir, "none"), "gateway", "run"}, "no such file"},
		{"has it", []string{newer, "gateway", "run", "--external-supervisor"}, []string{newer, "gateway", "run", "--external-supervisor"}, ""},
		{"not the gateway", []string{newer, "chat"}, []string{newer, "chat"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			progs := []supervisor.Program{{Name: "hermes", Command: tc.command, Environment: []string{"HERMES_HOME=/hh"}, Directory: dir}}
			withExternalSupervisorFlag(context.Background(), progs, slog.New(slog.NewTextHandler(&log, nil)))
			if diff := cmp.Diff(progs[0].Command, tc.want); diff != "" {
				t.Errorf("command (-got +want):\n%s", diff)
			}
			if tc.log != "" && !strings.Contains(log.String(), tc.log) || tc.log == "" && log.Len() > 0 {
				t.Errorf("log = %q, want %q", log.String(), tc.log)
			}
		})
	}
}
