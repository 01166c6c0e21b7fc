package main

import (
	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/verbopts"

	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
)

// newConfigCommand builds `hbx config`, the group of configuration commands.
func newConfigCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Inspect the configuration",
		Args:  cobra.ArbitraryArgs, // cli.Group reports unknown subcommands
		RunE:  cli.Group,
	}
	cmd.AddCommand(newConfigShowCommand(g), newConfigFlagsCommand(g))
	return cmd
}

// newConfigShowCommand builds `hbx config show`.
func newConfigShowCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print the effective configuration and where each value comes from",
		Long: `Print every configuration key with its effective value and its source:
a flag, an HBX_* environment variable, the config file or the default.

The default output is one YAML-ish line per key, after a first line that
names the config file and where its path came from (--config, HBX_CONFIG
or the default), "(absent)" when no file was read:

  config: /etc/hbx/hbx.yaml  # default (absent)
  executor.port: 4788  # default
  executor.image: ghcr.io/...  # env HBX_EXECUTOR_IMAGE

--json prints one object keyed by config key instead ("config" first), each
entry {"value": ..., "source": "default|file|env|flag", "detail": "path,
variable or flag"}, and "absent": true for a config file not read;
durations are strings such as "30s".

It also checks the files holding secrets that the configuration names
(executor.env_file, backup.passphrase_file, health.token_file), without
reading them: one that exists must be a regular file of mode 0600 or
stricter, else it is invalid configuration (exit 2). Like every command
that reads the configuration, it refuses the runtime, data, state and
backup directories, the secret and config files and hbx's own directory
when a user other than root could replace them (exit 2). An enabled
program whose user does not exist is printed, then refused as hbx
supervise would refuse it (exit 2).`,
		Args: cli.Args(0, 0),
		RunE: g.configured(func(cmd *cobra.Command, _ []string, cfg *config.Config, srcs *config.Sources) error {
			if err := cfg.CheckSecretFiles(srcs); err != nil {
				return err
			}
			if err := cfg.Show(g.stdout, srcs, asJSON); err != nil {
				return err
			}
			return verbopts.CheckProgramUsers(cfg)
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
