package main

import (
	"fmt"

	"github.com/hermesbox/hbx/internal/verbopts"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/adapters"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/executorrun"
	"github.com/hermesbox/hbx/internal/suggest"
	"github.com/hermesbox/hbx/release"
)

// newRunCommand builds `hbx run executor`.
func newRunCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "run executor",
		Short: "Run the active Executor release natively, in the foreground",
		Long: `Run starts the active release's program (the image config's Entrypoint
and Cmd) natively, with the image's Env and hbx's overrides: listen address,
port, data directory, base URL, local-network policy, HOME and TMPDIR under
the state directory, then the env file. Signals are passed to it and its exit
status becomes hbx's. It refuses to start when no release is active or the
active one is not the configured image: run "hbx install" first (while an
upgrade or a restore is half done, it names it and the command that undoes
it instead). It holds
the data directory's lock while the payload runs (the payload inherits it)
and refuses, naming the holder, while "hbx supervise" or another owner
holds it.`,
		Args:      cobra.MatchAll(cli.Args(1, 1), runProgramArg),
		ValidArgs: []string{"executor"},
		RunE: g.configured(func(cmd *cobra.Command, _ []string, cfg *config.Config, _ *config.Sources) error {
			// One writer per data directory: refuse beside a supervisor or
			// another run, before anything starts; stop what a dead owner
			// left. The payload inherits the lock.
			dl, err := adapters.LockData(cmd.Context(), cfg, g.log, "hbx run executor", true)
			if err != nil {
				return fmt.Errorf("run executor: %w", err)
			}
			defer dl.Release()
			return executorrun.Run(cmd.Context(), verbopts.Launch(cfg, release.DefaultHostPath), dl.File(), g.stdout, g.stderr, g.log)
		}),
	}
}

// runProgramArg refuses a program name other than "executor", the one
// program hbx run runs, with a "did you mean" when the name is near it.
func runProgramArg(_ *cobra.Command, args []string) error {
	if len(args) == 1 && args[0] != "executor" {
		hint := ""
		if c := suggest.Closest(args[0], []string{"executor"}); c != "" {
			hint = fmt.Sprintf("; did you mean %q?", c)
		}
		return cli.Usagef("run: no such program: %q (hbx run runs executor only%s)", args[0], hint)
	}
	return nil
}
