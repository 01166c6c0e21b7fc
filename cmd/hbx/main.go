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
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals(os.Args[1:])...)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) && !errors.Is(err, installer.ErrInterrupted) {
		err = fmt.Errorf("interrupted: %w", err)
	}
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "hbx: %v\n", err)
	}
	os.Exit(exitCode(err))
}

// run is hbx without the process around it: args exclude the program name,
// the environment is the process's. The returned error is what main prints;
// exitCode maps it to the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runEnv(ctx, args, os.Environ(), stdout, stderr)
}
