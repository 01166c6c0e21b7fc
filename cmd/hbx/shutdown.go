package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/supervisor"
)

// newShutdownCommand builds `hbx shutdown`.
func newShutdownCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "shutdown",
		Short: "Stop every supervised program and the supervisor",
		Args:  cli.Args(0, 0),
		RunE: g.configured(func(cmd *cobra.Command, _ []string, cfg *config.Config, _ *config.Sources) error {
			return runShutdown(cmd.Context(), cfg.Supervisor.Socket, g.stdout)
		}),
	}
}

// runShutdown asks the supervisor at socket to stop everything and exit,
// and returns once every program is stopped.
func runShutdown(ctx context.Context, socket string, stdout io.Writer) error {
	c, err := supervisor.DialHeld(ctx, socket)
	if err != nil {
		return err
	}
	if err := c.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	_, err = fmt.Fprintln(stdout, "shut down")
	return err
}
