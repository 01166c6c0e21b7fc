package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/supervisorclient"
)

// newShutdownCommand builds `hbx shutdown`.
func newShutdownCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "shutdown",
		Short: "Stop every supervised program and the supervisor",
		Args:  cli.Args(0, 0),
		RunE: g.configured(func(cmd *cobra.Command, _ []string, cfg *config.Config, _ *config.Sources) error {
			return runShutdown(cmd.Context(), cfg, g.stdout)
		}),
	}
}

// runShutdown asks the supervisor on cfg's socket to stop everything and exit,
// and returns once every program is stopped.
func runShutdown(ctx context.Context, cfg *config.Config, stdout io.Writer) error {
	c, err := supervisorclient.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	if err := c.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	_, err = fmt.Fprintln(stdout, "shut down")
	return err
}
