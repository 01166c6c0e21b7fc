package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/hermesbox/hbx/installer"
)

func main() {
	os.Exit(mainCode(os.Args[1:], os.Stdout, os.Stderr))
}

// mainCode is main up to its exit: it runs hbx ARGS, prints the error and
// returns the exit status. The stop signals (stopSignals) stay caught
// until the process exits, not only while run works: a Ctrl-C that lands
// after the work is done (a restore committed, its result printed) would
// otherwise kill hbx by the signal's default action, with no line said
// and an exit status that reads as a failure.
func mainCode(args []string, stdout, stderr io.Writer) int {
	ctx, _ := signal.NotifyContext(context.Background(), stopSignals(args)...)
	err := run(ctx, args, stdout, stderr)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) && !errors.Is(err, installer.ErrInterrupted) {
		err = fmt.Errorf("interrupted: %w", err)
	}
	if err != nil {
		fmt.Fprintf(stderr, "hbx: %v\n", err)
	}
	return exitCode(err)
}

// run is hbx without the process around it: args exclude the program name,
// the environment is the process's. The returned error is what main prints;
// exitCode maps it to the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runEnv(ctx, args, os.Environ(), stdout, stderr)
}
