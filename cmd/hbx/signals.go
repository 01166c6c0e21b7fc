package main

import (
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hermesbox/hbx/supervisor"
)

// stopSignals returns the signals that end main's context, and is the
// first thing main does: INT and TERM for every command. For `hbx
// supervise` it adds every other stop signal of supervisor.Signals (QUIT)
// and from here on catches and drops the rest (HUP, USR1...) until the
// supervisor's own handlers, installed once its configuration is loaded,
// take them too: before, a HUP killed it and a QUIT dumped its goroutines
// (issue 25 item 7).
func stopSignals(args []string) []os.Signal {
	stop := []os.Signal{syscall.SIGINT, syscall.SIGTERM}
	if subcommand(args) != "supervise" {
		return stop
	}
	var rest []os.Signal
	for sig, action := range supervisor.Signals {
		switch {
		case sig == syscall.SIGINT || sig == syscall.SIGTERM:
		case action == supervisor.SignalStop:
			stop = append(stop, sig)
		default:
			rest = append(rest, sig)
		}
	}
	signal.Notify(make(chan os.Signal, 1), rest...)
	return stop
}

// subcommand returns the first argument that is neither a flag nor the
// value of a global flag (--config FILE, --log-level LEVEL), "" when none.
func subcommand(args []string) string {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--":
			return ""
		case a == "--config" || a == "--log-level":
			i++
		case !strings.HasPrefix(a, "-"):
			return a
		}
	}
	return ""
}
