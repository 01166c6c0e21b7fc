package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/buildinfo"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/internal/pending"
	"github.com/hermesbox/hbx/rehearse"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

const testImage = "127.0.0.1:5000/hbx/executor:v2@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// writeConfig writes a config file into a fresh temp directory.
//
// A body that names no executor.user gets the test's own user (the
// caller's, as every other path of the test is): the default as root, the
// system user executor, would be created on the machine running the tests.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	if !strings.Contains(body, "\n  user:") {
		self := "executor:\n  user: \"" + account.Current() + "\"\n"
		if rest, ok := strings.CutPrefix(body, "executor:\n"); ok {
			body = self + rest
		} else if !strings.Contains(body, "\nexecutor:") {
			body = self + body
		}
	}
	path := filepath.Join(t.TempDir(), "hbx.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runTest runs hbx with args and env and returns stdout, stderr and the
// exit code main would use.
func runTest(t *testing.T, env []string, args ...string) (stdout, stderr string, code int, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = runEnv(context.Background(), args, env, &out, &errOut)
	return out.String(), errOut.String(), exitCode(err), err
}

func TestConfigShow(t *testing.T) {
	path := writeConfig(t, "executor:\n  port: 4790\n  listen: 127.0.0.2\n"+hermesAsSelf())
	env := []string{"HBX_EXECUTOR_IMAGE=" + testImage, "HBX_EXECUTOR_LISTEN=::1", "PATH=/bin"}
	out, _, code, err := runTest(t, env, "config", "show", "--config", path, "--registry-retries=5", "--log-level=debug")
	if code != 0 {
		t.Fatalf("config show = %v (exit %d)", err, code)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	defaults := config.Defaults()
	if len(lines) != 1+len(defaults.ShownKeys()) {
		t.Errorf("config show printed %d lines, want %d:\n%s", len(lines), 1+len(defaults.ShownKeys()), out)
	}
	byKey := map[string]string{}
	for _, l := range lines {
		k, _, _ := strings.Cut(l, ":")
		byKey[k] = l
	}
	want := map[string]string{
		"executor.image":                 "executor.image: " + testImage + "  # env HBX_EXECUTOR_IMAGE",
		"executor.listen":                `executor.listen: "::1"  # env HBX_EXECUTOR_LISTEN`,
		"executor.port":                  "executor.port: 4790  # file " + path,
		"executor.host_port":             "executor.host_port: 4788  # default",
		"executor.platform_digests":      "executor.platform_digests: {linux/arm64: sha256:c089ee8bffdbd81c854c3aee47a788484398694149597bc9d8863491b07e262f}  # default",
		"registry.retries":               "registry.retries: 5  # flag --registry-retries",
		"registry.insecure_hosts":        "registry.insecure_hosts: []  # default",
		"registry.stall_timeout":         "registry.stall_timeout: 30s  # default",
		"install.max_uncompressed_bytes": "install.max_uncompressed_bytes: 17179869184  # default",
		"executor.env_file":              `executor.env_file: ""  # default`,
	}
	for k, w := range want {
		if byKey[k] != w {
			t.Errorf("config show line for %s = %q, want %q", k, byKey[k], w)
		}
	}
	if w := "config: " + path + "  # flag --config"; lines[0] != w {
		t.Errorf("config show first line = %q, want %q", lines[0], w)
	}
	if lines[1] != want["executor.image"] {
		t.Errorf("config show second line = %q, want executor.image first of the keys", lines[1])
	}
}

func TestConfigShowConfigFile(t *testing.T) {
	path := writeConfig(t, "executor:\n  port: 4790\n"+hermesAsSelf())
	other := writeConfig(t, "executor:\n  port: 4791\n"+hermesAsSelf())
	tests := []struct {
		name      string
		env, args []string
		want      string
		wantJSON  config.ShownValue
	}{
		{"from HBX_CONFIG", []string{"HBX_CONFIG=" + path}, nil,
			"config: " + path + "  # env HBX_CONFIG", config.ShownValue{Value: path, Source: "env", Detail: "HBX_CONFIG"}},
		{"--config beats HBX_CONFIG", []string{"HBX_CONFIG=" + other}, []string{"--config", path},
			"config: " + path + "  # flag --config", config.ShownValue{Value: path, Source: "flag", Detail: "--config"}},
		{"default, absent", nil, nil,
			"config: " + config.DefaultPath + "  # default (absent)", config.ShownValue{Value: config.DefaultPath, Source: "default", Absent: true}},
	}
	if _, err := os.Stat(config.DefaultPath); err == nil {
		tests = tests[:2] // this machine has a default file
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The defaults' hermes runs as user hermes, which this machine
			// may not have: then config show prints and exits 2.
			wantCode := 0
			if _, _, err := account.IDs("hermes"); err != nil && tt.wantJSON.Absent {
				wantCode = exitUsage
			}
			out, _, code, err := runTest(t, tt.env, append([]string{"config", "show"}, tt.args...)...)
			if code != wantCode {
				t.Fatalf("config show = %v (exit %d), want exit %d", err, code, wantCode)
			}
			if first, _, _ := strings.Cut(out, "\n"); first != tt.want {
				t.Errorf("config show first line = %q, want %q", first, tt.want)
			}
			if tt.wantJSON.Source != "default" && !strings.Contains(out, "executor.port: 4790  # file "+path) {
				t.Errorf("config show did not read %s:\n%s", path, out)
			}
			out, _, code, err = runTest(t, tt.env, append([]string{"config", "show", "--json"}, tt.args...)...)
			if code != wantCode {
				t.Fatalf("config show --json = %v (exit %d)", err, code)
			}
			var got map[string]config.ShownValue
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("json.Unmarshal(config show --json) = %v\n%s", err, out)
			}
			if diff := cmp.Diff(got["config"], tt.wantJSON); diff != "" {
				t.Errorf("config show --json[config] (-got +want):\n%s", diff)
			}
		})
	}
}

func TestConfigShowJSON(t *testing.T) {
	path := writeConfig(t, "install:\n  lock_wait: 1m\nregistry:\n  insecure_hosts: [\"[::1]:5000\"]\n"+hermesAsSelf())
	out, _, code, err := runTest(t, []string{"HBX_EXECUTOR_PORT=4791"}, "config", "show", "--json", "--config", path)
	if code != 0 {
		t.Fatalf("config show --json = %v (exit %d)", err, code)
	}
	var got map[string]config.ShownValue
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("json.Unmarshal(config show --json) = %v\n%s", err, out)
	}
	defaults := config.Defaults()
	if len(got) != 1+len(defaults.ShownKeys()) {
		t.Errorf("config show --json has %d keys, want %d", len(got), 1+len(defaults.ShownKeys()))
	}
	want := map[string]config.ShownValue{
		"executor.port":              {Value: float64(4791), Source: "env", Detail: "HBX_EXECUTOR_PORT"},
		"install.lock_wait":          {Value: "1m0s", Source: "file", Detail: path},
		"registry.insecure_hosts":    {Value: []any{"[::1]:5000"}, Source: "file", Detail: path},
		"executor.disable_ipv6":      {Value: true, Source: "default"},
		"executor.disable_telemetry": {Value: true, Source: "default"},
		"config":                     {Value: path, Source: "flag", Detail: "--config"},
	}
	for k, w := range want {
		if diff := cmp.Diff(got[k], w); diff != "" {
			t.Errorf("config show --json[%s] (-got +want):\n%s", k, diff)
		}
	}
}

func TestExitCodes(t *testing.T) {
	good := writeConfig(t, "executor:\n  port: 4790\n"+hermesAsSelf())
	unknownKey := writeConfig(t, "executor:\n  prot: 4790\n")
	badValues := writeConfig(t, "executor:\n  listen: 0.0.0.0\n  port: 0\n")
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	typoProgram := writeConfig(t, "programs:\n  hermse:\n    enabled: false\n")
	// Secret files readable by others: invalid configuration (exit 2) for
	// hbx config show and for the commands that read them.
	sec := t.TempDir()
	envFile, passFile, tokenFile := filepath.Join(sec, "env"), filepath.Join(sec, "pass"), filepath.Join(sec, "token")
	for _, f := range []string{envFile, passFile, tokenFile} {
		os.WriteFile(f, []byte("A=1\n"), 0o644)
		os.Chmod(f, 0o644)
	}
	secretConfig := func(executor, backup, rest string) string {
		return writeConfig(t, "executor:\n  runtime_dir: "+sec+"/runtime\n  data_dir: "+sec+"/data\n  state_dir: "+sec+"/state\n"+executor+
			"supervisor:\n  socket: "+sec+"/hbx.sock\nbackup:\n  dir: "+sec+"/backups\n"+backup+rest)
	}
	looseEnv := secretConfig("  env_file: "+envFile+"\n", "", "")
	loosePass := secretConfig("", "  passphrase_file: "+passFile+"\n", "")
	looseToken := secretConfig("", "", "health:\n  token_file: "+tokenFile+"\n")
	dirEnv := writeConfig(t, "executor:\n  env_file: "+sec+"\n")
	tests := []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		wantErr  []string // substrings of the error text
	}{
		{"version", nil, []string{"version"}, 0, nil},
		{"help", nil, []string{"--help"}, 0, nil},
		{"no command prints help", nil, []string{}, 0, nil},
		{"config group prints help", nil, []string{"config"}, 0, nil},
		{"config show", nil, []string{"config", "show", "--config", good}, 0, nil},
		{"unknown command", nil, []string{"nope"}, 2, []string{`unknown command "nope" for "hbx"`}},
		{"unknown subcommand", nil, []string{"config", "nope"}, 2, []string{`unknown command "nope" for "hbx config"`}},
		{"unknown command near one", nil, []string{"instal"}, 2, []string{`unknown command "instal" for "hbx" (did you mean "install"?)`}},
		{"unknown subcommand near one", nil, []string{"config", "shwo"}, 2, []string{`unknown command "shwo" for "hbx config" (did you mean "show"?)`}},
		{"unknown backup subcommand near one", nil, []string{"backup", "lst"}, 2, []string{`unknown command "lst" for "hbx backup" (did you mean "list"?)`}},
		{"unknown flag", nil, []string{"version", "--nope"}, 2, []string{"unknown flag: --nope"}},
		{"unknown flag near a key flag", nil, []string{"config", "show", "--executor-prot=1"}, 2, []string{"unknown flag: --executor-prot (did you mean --executor-port?)"}},
		{"extra argument", nil, []string{"version", "extra"}, 2, []string{`version: takes no arguments, got "extra" (usage: hbx version [flags])`}},
		{"argument to install", nil, []string{"install", "now"}, 2, []string{`install: takes no arguments, got "now"`}},
		{"bad log level", nil, []string{"version", "--log-level=loud"}, 2, []string{`--log-level "loud"`}},
		{"unknown file key", nil, []string{"config", "show", "--config", unknownKey}, 2, []string{`executor.prot: unknown key (did you mean "executor.port"?) [file ` + unknownKey + "]"}},
		{"unknown env variable", []string{"HBX_EXECUTOR_PROT=1"}, []string{"config", "show", "--config", good}, 2, []string{"HBX_EXECUTOR_PROT: unknown environment variable"}},
		{"bad listen lists every problem", []string{"HBX_REGISTRY_RETRIES=-1"}, []string{"config", "show", "--config", badValues}, 2, []string{
			"invalid config, 3 problems:",
			`executor.listen: "0.0.0.0" is not a loopback address (want 127.0.0.0/8 or ::1) [file ` + badValues + "]",
			"executor.port: 0 is not a port number (want 1-65535) [file " + badValues + "]",
			"registry.retries: -1 is negative [env HBX_REGISTRY_RETRIES]",
		}},
		{"bad flag value", nil, []string{"config", "show", "--config", good, "--executor-port=x"}, 2, []string{`executor.port: "x" is not an integer [flag --executor-port]`}},
		{"missing explicit config", nil, []string{"config", "show", "--config", missing}, 2, []string{"config file " + missing + " (from flag --config) does not exist"}},
		{"missing config from HBX_CONFIG", []string{"HBX_CONFIG=" + missing}, []string{"config", "show"}, 2, []string{"config file " + missing + " (from env HBX_CONFIG) does not exist"}},
		{"unknown program near a built-in", nil, []string{"config", "show", "--config", typoProgram}, 2, []string{`programs.hermse: is not a built-in program (executor, hermes) and has no command (did you mean "hermes"?) [file ` + typoProgram + "]"}},
		{"config is a directory", nil, []string{"config", "show", "--config", filepath.Dir(good)}, 2, []string{"is a directory: not a regular file"}},
		{"run needs a program name", nil, []string{"run", "--config", good}, 2, []string{"run: takes one argument, got 0 (usage: hbx run executor [flags])"}},
		{"run knows only executor", nil, []string{"run", "hermes", "--config", good}, 2, []string{`run: no such program: "hermes" (hbx run runs executor only)`}},
		{"run near executor", nil, []string{"run", "exector", "--config", good}, 2, []string{`run: no such program: "exector" (hbx run runs executor only; did you mean "executor"?)`}},
		{"install with bad config", nil, []string{"install", "--config", badValues}, 2, []string{"executor.listen"}},
		{"config show, env file readable by others", nil, []string{"config", "show", "--config", looseEnv}, 2, []string{"executor.env_file: \"" + envFile + "\" has mode 0644: it holds secrets and must be 0600 or stricter"}},
		{"config show, passphrase file readable by others", nil, []string{"config", "show", "--config", loosePass}, 2, []string{"backup.passphrase_file: \"" + passFile + "\" has mode 0644"}},
		{"config show, token file readable by others", nil, []string{"config", "show", "--config", looseToken}, 2, []string{"health.token_file: \"" + tokenFile + "\" has mode 0644"}},
		{"config show, env file a directory", nil, []string{"config", "show", "--config", dirEnv}, 2, []string{"executor.env_file: \"" + sec + "\" is not a regular file"}},
		{"run, env file readable by others", nil, []string{"run", "executor", "--config", looseEnv}, 2, []string{"bad env file: executor.env_file " + envFile + " has mode 0644"}},
		{"backup, passphrase file readable by others", nil, []string{"backup", "--config", loosePass}, 2, []string{"bad passphrase file: backup.passphrase_file " + passFile + " has mode 0644"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, code, err := runTest(t, tt.env, tt.args...)
			if code != tt.wantCode {
				t.Errorf("hbx %q exit code = %d (%v), want %d", tt.args, code, err, tt.wantCode)
			}
			for _, w := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("hbx %q error = %v, want it to contain %q", tt.args, err, w)
				}
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{config.ErrInvalid, 2},
		{&cli.UsageError{Err: context.Canceled}, 2},
		{context.Canceled, 1},
		{os.ErrNotExist, 1},
		{fmt.Errorf("restore: %w: /data is the root of a mount", datalock.ErrMountPoint), 2}, // executor.data_dir set to a mount point
		{fmt.Errorf("status: %w", &pending.ChangeError{}), exitNotRunning},                   // pending.Change: hbx status exits 3
		{supervisor.NotRunning([]supervisor.Status{{Name: "hermes", State: supervisor.Fatal}}), exitNotRunning},
		{fmt.Errorf("upgrade: rehearse x (nothing was stopped, y stays active): %w", rehearse.ErrRefused), exitFailure},         // a release that would not come up
		{fmt.Errorf("upgrade: %w to x: health on y: boom; see hbx logs executor --stderr", upgrade.ErrRolledBack), exitFailure}, // the upgrade's own rollback
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestHelpDocumentsExitCodes(t *testing.T) {
	out, _, _, err := runTest(t, nil, "--help")
	if err != nil {
		t.Fatalf("hbx --help = %v", err)
	}
	for _, w := range []string{"Exit codes:", "  0  success", "  1  failure", "  2  invalid configuration", "  3  done, but not running", "hbx restore: the data", "HBX_CONFIG", configFlagsNote} {
		if !strings.Contains(out, w) {
			t.Errorf("hbx --help does not contain %q:\n%s", w, out)
		}
	}
	out, _, _, err = runTest(t, nil, "status", "--help")
	if err != nil {
		t.Fatalf("hbx status --help = %v", err)
	}
	for _, w := range []string{"Exit status: 0 when every program shown", "3 when any is not"} {
		if !strings.Contains(out, w) {
			t.Errorf("hbx status --help does not contain %q:\n%s", w, out)
		}
	}
	out, _, _, err = runTest(t, nil, "restore", "--help")
	if err != nil || !strings.Contains(out, "3 when the data is restored but left NOT started") {
		t.Errorf("hbx restore --help = %v, does not document exit 3:\n%s", err, out)
	}
}

func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &errOut); err != nil {
		t.Fatalf("run(version) = %v", err)
	}
	want := "platform: " + buildinfo.Platform() + "\n"
	if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "version:  "+buildinfo.Version+"\n") {
		t.Errorf("run(version) printed %q, want a version line and %q", out.String(), want)
	}
	if errOut.Len() != 0 {
		t.Errorf("run(version) wrote to stderr: %q", errOut.String())
	}
}

// hermesAsSelf is a config file's programs section running the hermes
// program as the current user (the default user hermes may not exist
// here, which hbx config show refuses).
func hermesAsSelf() string {
	return "programs:\n  hermes:\n    user: \"" + account.Current() + "\"\n"
}
