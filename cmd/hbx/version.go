package main

import (
	"context"
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/buildinfo"
	"github.com/hermesbox/hbx/internal/cli"
)

// versionOptions are the inputs of runVersion.
type versionOptions struct {
	stdout io.Writer
}

// newVersionCommand builds `hbx version`.
func newVersionCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print hbx's version, commit, Go version and target platform",
		Args:  cli.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runVersion(cmd.Context(), versionOptions{stdout: g.stdout})
		},
	}
}

// runVersion prints one "name: value" line each for the version, commit,
// Go version and the os/arch hbx was built for.
func runVersion(_ context.Context, opts versionOptions) error {
	_, err := fmt.Fprintf(opts.stdout, "version:  %s\ncommit:   %s\ngo:       %s\nplatform: %s\n",
		buildinfo.Version, buildinfo.Commit, runtime.Version(), buildinfo.Platform())
	return err
}
