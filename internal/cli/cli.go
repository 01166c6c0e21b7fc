package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hermesbox/hbx/internal/suggest"
)

// UsageError marks a bad command line: unknown command or flag, bad
// arguments or flag values. cmd/hbx maps it to exit status 2.
type UsageError struct{ Err error }

// Error returns the wrapped error's text.
func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef formats a *UsageError (fmt.Errorf's verbs, %w included).
func Usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// Args is the argument validator of a command taking between min and
// max positional arguments (max < 0: no upper bound). Its error is a usage
// error naming the command, what it takes, what it got and its usage line
// ("restore: takes one argument, got 0 (usage: hbx restore ARCHIVE
// [flags])"); cobra's own ("accepts 1 arg(s), received 0", or
// "unknown command" for an argument given to a command taking none) name
// neither the command nor the argument it wants.
func Args(min, max int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
		usage := cmd.UseLine()
		switch {
		case max == 0 && len(args) > 0:
			return Usagef("%s: takes no arguments, got %q (usage: %s)", name, args[0], usage)
		case len(args) < min && min == max:
			return Usagef("%s: takes %s, got %d (usage: %s)", name, countArgs(min), len(args), usage)
		case len(args) < min:
			return Usagef("%s: takes at least %s, got %d (usage: %s)", name, countArgs(min), len(args), usage)
		case max >= 0 && len(args) > max:
			return Usagef("%s: takes %s, got %d (usage: %s)", name, countArgs(max), len(args), usage)
		}
		return nil
	}
}

// countArgs spells n arguments: "one argument", "2 arguments".
func countArgs(n int) string {
	if n == 1 {
		return "one argument"
	}
	return strconv.Itoa(n) + " arguments"
}

// Group is the RunE of commands that only group subcommands: with no
// argument it prints help, with one it reports an unknown command.
func Group(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return UnknownCommand(cmd, args[0])
	}
	return cmd.Help()
}

// NoArgs is cobra.NoArgs for a command with subcommands: an argument is an
// unknown subcommand, with a "did you mean".
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return UnknownCommand(cmd, args[0])
	}
	return nil
}

// UnknownCommand is the usage error for name, which is not a subcommand of
// cmd, with a "did you mean" when a subcommand's name or alias is near
// (suggest.Closest). cobra suggests only for commands without an Args
// validator, and hbx's groups have one.
func UnknownCommand(cmd *cobra.Command, name string) error {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(append(names, c.Name()), c.Aliases...)
		}
	}
	if c := suggest.Closest(name, names); c != "" {
		return Usagef("unknown command %q for %q (did you mean %q?)", name, cmd.CommandPath(), c)
	}
	return Usagef("unknown command %q for %q", name, cmd.CommandPath())
}

// FlagError is a cobra flag error function: a *UsageError, with a "did
// you mean" added to pflag's "unknown flag: --name" when one of cmd's
// flags is close to name, and a value a typed flag cannot parse said in
// the words of a config value's error (badValue) rather than strconv's.
func FlagError(cmd *cobra.Command, err error) error {
	var ive *pflag.InvalidValueError
	if errors.As(err, &ive) {
		return &UsageError{badValue(ive)}
	}
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return &UsageError{err}
	}
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	if c := suggest.Closest(name, names); c != "" {
		return &UsageError{fmt.Errorf("%w (did you mean --%s?)", err, c)}
	}
	return &UsageError{err}
}

// badValue words a typed flag's unparsable value as a config value's
// error is worded: `--lines: "abc" is not an integer`. A flag type it
// does not know keeps the cause its Set returned.
func badValue(e *pflag.InvalidValueError) error {
	f := e.GetFlag()
	want := ""
	switch f.Value.Type() {
	case "int", "int8", "int16", "int32", "int64":
		want = "is not an integer"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		want = "is not a whole number"
	case "float32", "float64":
		want = "is not a number"
	case "duration":
		want = "is not a duration (want Go syntax, e.g. 30s or 1m30s)"
	case "bool":
		want = "is not a boolean (want true or false)"
	default:
		return fmt.Errorf("--%s: %q: %w", f.Name, e.GetValue(), e.Unwrap())
	}
	return fmt.Errorf("--%s: %q %s", f.Name, e.GetValue(), want)
}

// NewLogger returns a text logger writing to w at level ("debug", "info",
// "warn", "error", any case). An unknown level is a usage error.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, Usagef("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// QuietImageLibrary silences the logrus output of go.podman.io/image (it
// prints retries such as "Reading blob body ... reconnecting" on its own);
// hbx reports those itself. At --log-level debug its lines pass through.
func QuietImageLibrary(w io.Writer, level string) {
	if strings.EqualFold(level, "debug") {
		logrus.SetOutput(w)
		logrus.SetLevel(logrus.DebugLevel)
		return
	}
	logrus.SetOutput(io.Discard)
}
