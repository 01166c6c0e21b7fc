package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/ui"
)

// newConfigFlagsCommand builds `hbx config flags`: the config-key flags
// that every command accepts and that its --help leaves out (see
// configFlagsNote). It reads no configuration.
func newConfigFlagsCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "flags",
		Short: "List the flag of every config key (accepted by every command)",
		Long: `List the flag of every config key, with its type, meaning and default.
Every hbx command accepts these flags; their --help leaves them out.`,
		Args: cli.Args(0, 0),
		RunE: func(*cobra.Command, []string) error {
			fs := pflag.NewFlagSet("hbx", pflag.ContinueOnError)
			config.RegisterFlags(fs)
			return ui.ConfigFlagsText(g.stdout, fs)
		},
	}
}
