package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// testTree is a root "hbx" with a group "config" holding "show", and
// "restore" taking one argument, flags --json and --config.
func testTree() (root, group, restore *cobra.Command) {
	root = &cobra.Command{Use: "hbx", SilenceErrors: true, SilenceUsage: true, Args: cobra.ArbitraryArgs, RunE: Group}
	root.PersistentFlags().String("config", "", "")
	root.SetFlagErrorFunc(FlagError)
	group = &cobra.Command{Use: "config", Args: cobra.ArbitraryArgs, RunE: Group}
	group.AddCommand(&cobra.Command{Use: "show", Args: Args(0, 0), RunE: func(*cobra.Command, []string) error { return nil }})
	restore = &cobra.Command{Use: "restore ARCHIVE", Args: Args(1, 1), RunE: func(*cobra.Command, []string) error { return nil }}
	restore.Flags().Bool("json", false, "")
	restore.Flags().IntP("lines", "n", 0, "")
	restore.Flags().Duration("wait", 0, "")
	restore.Flags().Float64("ratio", 0, "")
	restore.Flags().Uint("keep", 0, "")
	restore.Flags().IP("ip", nil, "")
	root.AddCommand(group, restore)
	root.SetOut(&bytes.Buffer{})
	return root, group, restore
}

// TestArgsAndHints: the usage errors a command line gets, each naming the
// command and what it wants, with a "did you mean" where one is near.
func TestArgsAndHints(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"restore"}, "restore: takes one argument, got 0 (usage: hbx restore ARCHIVE [flags])"},
		{[]string{"restore", "a", "b"}, "restore: takes one argument, got 2 (usage: hbx restore ARCHIVE [flags])"},
		{[]string{"config", "show", "x"}, `config show: takes no arguments, got "x" (usage: hbx config show [flags])`},
		{[]string{"config", "shw"}, `unknown command "shw" for "hbx config" (did you mean "show"?)`},
		{[]string{"restor"}, `unknown command "restor" for "hbx" (did you mean "restore"?)`},
		{[]string{"zzzzzz"}, `unknown command "zzzzzz" for "hbx"`},
		{[]string{"restore", "a", "--jsn"}, "unknown flag: --jsn (did you mean --json?)"},
		{[]string{"restore", "a", "--zzzzzz"}, "unknown flag: --zzzzzz"},
		{[]string{"restore", "a", "--json=maybe"}, `--json: "maybe" is not a boolean (want true or false)`},
		{[]string{"restore", "a", "-n", "abc"}, `--lines: "abc" is not an integer`},
		{[]string{"restore", "a", "--lines=1.5"}, `--lines: "1.5" is not an integer`},
		{[]string{"restore", "a", "--wait", "5"}, `--wait: "5" is not a duration (want Go syntax, e.g. 30s or 1m30s)`},
		{[]string{"restore", "a", "--ratio", "x"}, `--ratio: "x" is not a number`},
		{[]string{"restore", "a", "--keep", "-1"}, `--keep: "-1" is not a whole number`},
		{[]string{"restore", "a", "--ip", "x"}, `--ip: "x": failed to parse IP: "x"`},
	} {
		root, _, _ := testTree()
		root.SetArgs(tt.args)
		err := root.Execute()
		var ue *UsageError
		if !errors.As(err, &ue) || err.Error() != tt.want {
			t.Errorf("hbx %q = %v, want the usage error %q", tt.args, err, tt.want)
		}
	}
	if got := countArgs(3); got != "3 arguments" {
		t.Errorf("countArgs(3) = %q", got)
	}
	_, group, _ := testTree()
	if err := NoArgs(group, nil); err != nil {
		t.Errorf("NoArgs(none) = %v", err)
	}
	if err := NoArgs(group, []string{"shw"}); err == nil || !strings.Contains(err.Error(), `did you mean "show"`) {
		t.Errorf("NoArgs(shw) = %v, want a did you mean", err)
	}
}

func TestLogLevel(t *testing.T) {
	for _, level := range []string{"debug", "INFO", "warn", "error"} {
		if _, err := NewLogger(&bytes.Buffer{}, level); err != nil {
			t.Errorf("NewLogger(%q) = %v", level, err)
		}
	}
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "warn")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown")
	if strings.Contains(buf.String(), "hidden") || !strings.Contains(buf.String(), "level=WARN msg=shown") {
		t.Errorf("NewLogger(warn) wrote %q, want only the warning", buf.String())
	}
}

func TestNewLoggerUnknownLevel(t *testing.T) {
	var ue *UsageError
	if _, err := NewLogger(&bytes.Buffer{}, "loud"); !errors.As(err, &ue) || err.Error() != `--log-level "loud": want debug, info, warn or error` {
		t.Errorf("NewLogger(loud) = %v, want a usage error", err)
	}
}
