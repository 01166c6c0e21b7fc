package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/config"
)

func TestControlWithoutSupervisor(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "hbx.sock")
	// The programs' logs in a directory of the test's own: hbx logs
	// reads them without a supervisor when they exist, and the default
	// /var/log/hbx may hold an earlier run's on this machine.
	logDir := t.TempDir()
	cfg := writeConfig(t, "supervisor:\n  socket: "+sock+"\n  log_dir: "+logDir+"\n")
	tests := []struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		{[]string{"status"}, 1, "no supervisor is running (nothing listens on " + sock + ")"},
		{[]string{"stop", "all"}, 1, "no supervisor is running"},
		{[]string{"shutdown"}, 1, "no supervisor is running"},
		{[]string{"logs", "executor"}, 1, "no supervisor is running"},
		{[]string{"start"}, 2, "start: takes at least one argument, got 0 (usage: hbx start NAME...|all [flags])"},
		{[]string{"logs"}, 2, "logs: takes one argument, got 0 (usage: hbx logs NAME [flags])"},
		{[]string{"logs", "executor", "-n", "-1"}, 2, `--lines: "-1" is not a line count`},
	}
	for _, tt := range tests {
		_, _, code, err := runTest(t, nil, append(tt.args, "--config", cfg)...)
		if code != tt.wantCode || err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("hbx %q = %d, %v; want %d containing %q", tt.args, code, err, tt.wantCode, tt.wantErr)
		}
	}

	// The error says which config and socket the command used.
	other := filepath.Join(t.TempDir(), "other.sock")
	for _, tt := range []struct {
		env, args []string
		want      string
	}{
		{nil, []string{"--config", cfg}, "[socket " + sock + ": file " + cfg + "; config file " + cfg + " (from flag --config)]"},
		{[]string{"HBX_CONFIG=" + cfg}, nil, "[socket " + sock + ": file " + cfg + "; config file " + cfg + " (from env HBX_CONFIG)]"},
		{[]string{"HBX_CONFIG=" + cfg, "HBX_SUPERVISOR_SOCKET=" + other}, nil, "[socket " + other + ": env HBX_SUPERVISOR_SOCKET; config file " + cfg + " (from env HBX_CONFIG)]"},
		{nil, []string{"--supervisor-socket", other, "--supervisor-log-dir", logDir}, "[socket " + other + ": flag --supervisor-socket; no config file (" + config.DefaultPath + " is absent), defaults]"},
	} {
		if _, err := os.Stat(config.DefaultPath); err == nil && len(tt.env) == 0 && !slices.Contains(tt.args, "--config") {
			continue // this machine has a default config file
		}
		for _, cmd := range [][]string{{"status"}, {"stop", "all"}, {"logs", "executor"}, {"shutdown"}} {
			_, _, code, err := runTest(t, tt.env, append(cmd, tt.args...)...)
			if code != 1 || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("hbx %q %q with %q = %d, %v; want 1 containing %q", cmd, tt.args, tt.env, code, err, tt.want)
			}
		}
	}
}

func TestSuperviseRefusesMissingUser(t *testing.T) {
	cfg := writeConfig(t, "programs:\n  hermes:\n    user: no-such-user-hbx\n")
	_, _, code, err := runTest(t, nil, "supervise", "--config", cfg)
	if code != 2 || err == nil || !strings.Contains(err.Error(), `program "hermes": user "no-such-user-hbx"`) {
		t.Errorf("hbx supervise with a missing user = %d, %v; want 2 naming the user", code, err)
	}
}

func TestSuperviseRefusesTypoProgram(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "hbx.sock")
	cfg := writeConfig(t, "supervisor:\n  socket: "+sock+"\nprograms:\n  hermse:\n    enabled: false\n")
	_, _, code, err := runTest(t, nil, "supervise", "--config", cfg)
	want := `programs.hermse: is not a built-in program (executor, hermes) and has no command (did you mean "hermes"?) [file ` + cfg + "]"
	if code != 2 || err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("hbx supervise with programs.hermse = %d, %v; want 2 containing %q", code, err, want)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("a refused supervisor created its socket: %v", err)
	}
}

// TestProgramUserMissing: an enabled program whose user does not exist is
// refused by hbx supervise and by hbx config show (which still prints the
// configuration) with the same one line, exit 2, saying what to do; a
// disabled one is not.
func TestProgramUserMissing(t *testing.T) {
	want := `invalid program: program "hermes": user "no-such-user-hbx": not in the user database: create the user, or set programs.hermes.enabled: false or another programs.hermes.user`
	for _, tc := range []struct {
		name, body string
		args       []string
		wantCode   int
		wantErr    string
	}{
		{"supervise", "programs:\n  hermes:\n    user: no-such-user-hbx\n", []string{"supervise"}, 2, want},
		{"config show", "programs:\n  hermes:\n    user: no-such-user-hbx\n", []string{"config", "show"}, 2, want},
		{"config show, disabled", "programs:\n  hermes:\n    user: no-such-user-hbx\n    enabled: false\n", []string{"config", "show"}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeConfig(t, "supervisor:\n  socket: "+filepath.Join(t.TempDir(), "hbx.sock")+"\n"+tc.body)
			out, _, code, err := runTest(t, nil, append(tc.args, "--config", cfg)...)
			if code != tc.wantCode || (tc.wantErr == "") != (err == nil) || err != nil && !strings.HasPrefix(err.Error(), tc.wantErr) || strings.Contains(fmt.Sprint(err), "\n") {
				t.Fatalf("hbx %q = %d, %v; want %d starting %q", tc.args, code, err, tc.wantCode, tc.wantErr)
			}
			if tc.args[0] == "config" && !strings.Contains(out, "programs.hermes.user: no-such-user-hbx") {
				t.Errorf("hbx config show printed %q, want the configuration", out)
			}
		})
	}
}
