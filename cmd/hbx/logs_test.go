package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/account"
)

// TestLogsWithoutSupervisor: with no supervisor running (after hbx
// shutdown), hbx logs prints the files on disk, saying so in one stderr
// line; it refuses -f, a symbolic link in place of a log, a log dir others
// can write to, and names a missing file or an unknown program.
func TestLogsWithoutSupervisor(t *testing.T) {
	root := t.TempDir()
	logDir := filepath.Join(root, "log")
	own := filepath.Join(root, "gateway.log")
	openDir := filepath.Join(root, "open")
	for _, d := range []string{logDir, openDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(openDir, 0o777); err != nil {
		t.Fatal(err)
	}
	for path, body := range map[string]string{
		filepath.Join(logDir, "executor.out.log"): "one\ntwo\nthree\n",
		filepath.Join(logDir, "executor.err.log"): "err1\nerr2\n",
		filepath.Join(openDir, "hermes.out.log"):  "x\n",
		own:                                       "g1\ng2\ng3",
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(logDir, "hermes.err.log")); err != nil {
		t.Fatal(err)
	}
	self := account.Current()
	sock := filepath.Join(t.TempDir(), "hbx.sock")
	base := "supervisor:\n  socket: " + sock + "\n  log_dir: %s\nprograms:\n  hermes:\n    user: \"" + self + "\"\n    log_file: " + own + "\n"
	cfg := writeConfig(t, strings.Replace(base, "%s", logDir, 1))
	openCfg := writeConfig(t, strings.Replace(base, "%s", openDir, 1))
	tests := []struct {
		name               string
		cfg                string
		args               []string
		wantCode           int
		wantOut, wantErr   string
		wantStderrFromDisk string
	}{
		{"stdout", cfg, []string{"logs", "executor", "-n", "2"}, 0, "two\nthree\n", "", filepath.Join(logDir, "executor.out.log")},
		{"stderr", cfg, []string{"logs", "executor", "--stderr"}, 0, "err1\nerr2\n", "", filepath.Join(logDir, "executor.err.log")},
		{"own file", cfg, []string{"logs", "hermes", "--file", "-n", "1"}, 0, "g3", "", own},
		{"follow", cfg, []string{"logs", "executor", "-f"}, 1, "", "logs: -f follows the log through the supervisor: no supervisor is running", ""},
		{"symlink", cfg, []string{"logs", "hermes", "--stderr"}, 1, "", filepath.Join(logDir, "hermes.err.log") + " is a symbolic link", ""},
		{"missing", cfg, []string{"logs", "hermes"}, 1, "", "and there is no log file " + filepath.Join(logDir, "hermes.out.log"), ""},
		{"executor own file", cfg, []string{"logs", "executor", "--file"}, 1, "", "programs.executor.log_file cannot be set): its output is in `hbx logs executor`", ""},
		{"unknown program", cfg, []string{"logs", "hermse"}, 2, "", `logs: no such program: "hermse" (programs: executor, hermes; did you mean "hermes"?) (no supervisor is running`, ""},
		{"log dir others write", openCfg, []string{"logs", "hermes"}, 1, "", "path is writable by an untrusted user", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, code, err := runTest(t, nil, append(tt.args, "--config", tt.cfg)...)
			if code != tt.wantCode || out != tt.wantOut {
				t.Fatalf("hbx %q = %q, %d, %v; want %q, %d", tt.args, out, code, err, tt.wantOut, tt.wantCode)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("hbx %q: %v; want containing %q", tt.args, err, tt.wantErr)
			}
			if tt.wantStderrFromDisk != "" {
				want := "hbx: no supervisor is running; printing the file on disk: " + tt.wantStderrFromDisk + "\n"
				if !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 {
					t.Errorf("hbx %q stderr = %q; want the one line %q", tt.args, stderr, want)
				}
			}
		})
	}
}

// TestTypedFlagValuesRefused: a value a typed flag of a real command
// cannot take is a usage error (exit 2) worded as a config value's, not
// strconv's, and a negative --lines is refused the same way.
func TestTypedFlagValuesRefused(t *testing.T) {
	cfg := writeConfig(t, "")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "executor", "-n", "abc"}, `hbx: --lines: "abc" is not an integer`},
		{[]string{"logs", "executor", "-n", "-5"}, `hbx: --lines: "-5" is not a line count (want 0 or more)`},
		{[]string{"status", "--json=maybe"}, `hbx: --json: "maybe" is not a boolean (want true or false)`},
	} {
		args := append([]string{"--config", cfg}, tt.args...)
		_, _, code, err := runTest(t, nil, args...)
		if code != exitUsage || err == nil || "hbx: "+err.Error() != tt.want {
			t.Errorf("hbx %q = %v (exit %d), want %q (exit %d)", tt.args, err, code, tt.want, exitUsage)
		}
	}
}
