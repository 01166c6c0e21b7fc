package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/box"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/supervisor"
)

// logsOptions are the inputs of runLogs.
type logsOptions struct {
	socket string
	cfg    *config.Config // names disabled programs in errors; may be nil
	req    supervisor.LogsRequest
	stdout io.Writer
}

// newLogsCommand builds `hbx logs`.
func newLogsCommand(g *globals) *cobra.Command {
	var o logsOptions
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print a supervised program's log",
		Long: `Logs prints the last lines of a program's stdout log (--stderr: its stderr
log; --file: the log it writes itself, programs.<name>.log_file, such as
the Hermes gateway's logs/gateway.log); -f keeps printing what the program
writes until interrupted.`,
		Args: cli.Args(1, 1),
		RunE: g.configured(func(cmd *cobra.Command, args []string, cfg *config.Config, _ *config.Sources) error {
			if o.req.Lines < 0 {
				return cli.Usagef("-n %d: want a line count", o.req.Lines)
			}
			if o.req.Stderr && o.req.File {
				return cli.Usagef("--stderr and --file: want one log")
			}
			o.socket, o.cfg, o.req.Name, o.stdout = cfg.Supervisor.Socket, cfg, args[0], g.stdout
			return runLogs(cmd.Context(), o)
		}),
	}
	cmd.Flags().BoolVarP(&o.req.Follow, "follow", "f", false, "keep printing new output")
	cmd.Flags().IntVarP(&o.req.Lines, "lines", "n", 10, "print the last N lines first")
	cmd.Flags().BoolVar(&o.req.Stderr, "stderr", false, "the stderr log instead of stdout")
	cmd.Flags().BoolVar(&o.req.File, "file", false, "the log the program writes itself (programs.<name>.log_file)")
	return cmd
}

// runLogs copies the log to opts.stdout.
func runLogs(ctx context.Context, opts logsOptions) error {
	c, err := supervisor.DialHeld(ctx, opts.socket)
	if err != nil {
		return err
	}
	if err := box.CheckSupervised(ctx, c, opts.cfg, []string{opts.req.Name}, false); err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	if err := c.Logs(ctx, opts.req, opts.stdout); err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	return nil
}
