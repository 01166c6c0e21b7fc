package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/programname"
	"github.com/hermesbox/hbx/internal/supervisorclient"
	"github.com/hermesbox/hbx/supervisor"
)

// controlOptions are the inputs of runControl.
type controlOptions struct {
	cfg    *config.Config // its supervisor.socket; names disabled programs in errors
	verb   string         // "start", "stop" or "restart"
	names  []string
	stdout io.Writer
}

// newControlCommand builds `hbx start`, `hbx stop` or `hbx restart`.
func newControlCommand(g *globals, verb, short, long string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " NAME...|all",
		Short: short,
		Long:  long,
		Args:  cli.Args(1, -1),
		RunE: g.configured(func(cmd *cobra.Command, args []string, cfg *config.Config, _ *config.Sources) error {
			return runControl(cmd.Context(), controlOptions{cfg: cfg, verb: verb, names: args, stdout: g.stdout})
		}),
	}
}

// newStartStopCommands builds the three control commands.
func newStartStopCommands(g *globals) []*cobra.Command {
	return []*cobra.Command{
		newControlCommand(g, "start", "Start supervised programs and wait until they are RUNNING",
			`Start starts the named programs ("all" for every one) in priority order and
waits until each is RUNNING (Executor: answering its health check) or
FATAL. Exit status 1 when one of them did not start. A stopped program that
could not start (Executor: its configured release is not the active one) is
refused, nothing started, as restart refuses it. While hbx supervise
installs the release first (executor.install_on_start), start and restart
wait for the install, then check the release it installed.`),
		newControlCommand(g, "stop", "Stop supervised programs and wait until their process groups are gone",
			`Stop sends each program's stopsignal to its whole process group, waits
stopwaitsecs, then SIGKILL; programs stop in reverse priority order.`),
		newControlCommand(g, "restart", "Stop, then start supervised programs",
			`Restart stops the named programs, then starts them again; a program starts
only after its old process group is gone. A program that could not start
again (Executor: its configured release is not the active one) is refused
before it is stopped and keeps running; the others named (all) are
restarted. A line per refused program; exit status 1 when one was refused
(2 when its env or token file is bad).`),
	}
}

// runControl asks the supervisor to start, stop or restart opts.names and
// prints one line per program.
func runControl(ctx context.Context, opts controlOptions) error {
	c, err := supervisorclient.Dial(ctx, opts.cfg)
	if err != nil {
		return err
	}
	// The supervisor refuses unknown names too; asking first gives the
	// same hints as hbx status.
	if err := programname.CheckSupervised(ctx, c, opts.cfg, opts.names, true); err != nil {
		return fmt.Errorf("%s: %w", opts.verb, err)
	}
	res, err := c.Control(ctx, opts.verb, opts.names...)
	if errors.Is(err, supervisor.ErrRefused) {
		return err // "restart NAME: why; nothing stopped", a line per program
	}
	if err != nil {
		return fmt.Errorf("%s: %w", opts.verb, err)
	}
	text, err := c.ControlText(opts.verb, res)
	_, _ = io.WriteString(opts.stdout, text)
	if err != nil {
		return fmt.Errorf("%s: %w", opts.verb, err)
	}
	return nil
}
