package main

import (
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/config"
)

// commandPath is one command of hbx's tree and the arguments naming it.
type commandPath struct {
	args []string // {"config", "show"}; nil for the root
	cmd  *cobra.Command
}

// commandPaths returns every available command of hbx's tree, the root
// first.
func commandPaths(t *testing.T) []commandPath {
	t.Helper()
	g := &globals{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
	var paths []commandPath
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, commandPath{path, c})
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				walk(sub, append(append([]string(nil), path...), sub.Name()))
			}
		}
	}
	walk(newRootCommand(g), nil)
	if len(paths) < 15 {
		t.Fatalf("commandPaths found %d commands, want every hbx command", len(paths))
	}
	return paths
}

// flagLine matches a flag line of cobra's help for the flag name.
func flagLine(name string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^\s+(?:-\w, )?--` + regexp.QuoteMeta(name) + `\b`)
}

// TestHelpHidesConfigKeyFlags: no command's --help lists the ~50
// config-key flags (they buried each command's own flags), except a
// command's own flag of the same name (hbx box new --executor-image); each lists
// --config and --log-level and ends with the note saying where the
// config-key flags are listed, before cobra's "Use ... --help" line; and
// fits a screen (maxHelpLines), the rest left to docs/ (issue 26).
func TestHelpHidesConfigKeyFlags(t *testing.T) {
	const maxHelpLines = 60
	for _, p := range commandPaths(t) {
		name := strings.Join(append([]string{"hbx"}, p.args...), " ")
		t.Run(name, func(t *testing.T) {
			out, _, code, err := runTest(t, nil, append(p.args, "--help")...)
			if code != 0 {
				t.Fatalf("%s --help = %v (exit %d)", name, err, code)
			}
			if n := strings.Count(out, "\n"); n > maxHelpLines {
				t.Errorf("%s --help has %d lines, want at most %d (point to docs/ instead)", name, n, maxHelpLines)
			}
			for _, k := range config.Keys() {
				if p.cmd.LocalNonPersistentFlags().Lookup(config.FlagName(k)) == nil && flagLine(config.FlagName(k)).MatchString(out) {
					t.Errorf("%s --help lists --%s:\n%s", name, config.FlagName(k), out)
				}
			}
			for _, f := range []string{"config", "log-level"} {
				if !flagLine(f).MatchString(out) {
					t.Errorf("%s --help does not list --%s:\n%s", name, f, out)
				}
			}
			i := strings.Index(out, configFlagsNote)
			if i < 0 || strings.Index(out, "Flags:") > i {
				t.Errorf("%s --help does not end its flags with %q:\n%s", name, configFlagsNote, out)
			}
			if j := strings.Index(out, "Use \""); j >= 0 && j < i {
				t.Errorf("%s --help has the config-flags note after its last line:\n%s", name, out)
			}
		})
	}
}

// TestConfigFlagsListsEveryKey: "hbx config flags" lists the flag of
// every config key (config.Keys, the table config's tests and the
// README's key table check) with its type, and nothing else.
func TestConfigFlagsListsEveryKey(t *testing.T) {
	out, _, code, err := runTest(t, nil, "config", "flags")
	if code != 0 {
		t.Fatalf("hbx config flags = %v (exit %d)", err, code)
	}
	keys := config.Keys()
	for _, k := range keys {
		if !flagLine(config.FlagName(k)).MatchString(out) {
			t.Errorf("hbx config flags does not list --%s (key %s):\n%s", config.FlagName(k), k, out)
		}
	}
	for _, w := range []string{"--executor-port int", "--install-keep-blobs", "--backup-lock-wait duration", "HBX_EXECUTOR_PORT", "hbx config show"} {
		if !strings.Contains(out, w) {
			t.Errorf("hbx config flags does not contain %q:\n%s", w, out)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^\s+--`).FindAllString(out, -1)); n != len(keys) {
		t.Errorf("hbx config flags lists %d flags, want %d (one per config key):\n%s", n, len(keys), out)
	}
	if _, _, code, err := runTest(t, nil, "config", "flags", "extra"); code != exitUsage || err == nil {
		t.Errorf("hbx config flags extra = %v (exit %d), want a usage error (exit 2)", err, code)
	}
}

// TestConfigKeyFlagsStillWork: the config-key flags hidden from help are
// still parsed on every command, before or after the subcommand; a
// misspelt one still gets its "did you mean".
func TestConfigKeyFlagsStillWork(t *testing.T) {
	path := writeConfig(t, "executor:\n  port: 4790\n"+hermesAsSelf())
	env := []string{"HBX_EXECUTOR_IMAGE=" + testImage, "PATH=/bin"}
	tests := []struct {
		name string
		args []string
	}{
		{"after the subcommand", []string{"config", "show", "--config", path, "--executor-port", "5000"}},
		{"before the subcommand", []string{"--executor-port=5000", "config", "show", "--config", path}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, code, err := runTest(t, env, tt.args...)
			if code != 0 {
				t.Fatalf("hbx %q = %v (exit %d)", tt.args, err, code)
			}
			if w := "executor.port: 5000  # flag --executor-port\n"; !strings.Contains(out, w) {
				t.Errorf("hbx %q does not print %q:\n%s", tt.args, w, out)
			}
		})
	}
	_, _, code, err := runTest(t, env, "config", "show", "--config", path, "--executor-prot", "5000")
	if code != exitUsage || err == nil || !strings.Contains(err.Error(), "did you mean --executor-port?") {
		t.Errorf("hbx config show --executor-prot = %v (exit %d), want exit 2 with a did-you-mean", err, code)
	}
}
