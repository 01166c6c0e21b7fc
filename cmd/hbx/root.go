package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hermesbox/hbx/internal/adapters"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/supervisor"
)

// globals is what every subcommand shares: the process's environment and
// output streams, the persistent flags and the logger built from them.
// Subcommands receive it from newRootCommand; nothing here is a package
// global.
type globals struct {
	env    []string  // the environment, os.Environ() form; config reads HBX_* from it
	stdout io.Writer // command output
	stderr io.Writer // logs

	configPath string // --config; after loadConfig, the file Load used (maybe from HBX_CONFIG)
	logLevel   string // --log-level

	// configFile and socket say which config file the command read and
	// which supervisor socket it used, for errors about a missing
	// supervisor; set by loadConfig.
	configFile *config.File
	socket     string
	// socketSource is where supervisor.socket's value came from.
	socketSource config.Source

	// log writes text records to stderr at --log-level. It discards until
	// the root's PersistentPreRunE has run, so runX functions called
	// directly from tests may use it.
	log *slog.Logger
}

// runEnv runs hbx with args (without the program name) and the environment
// env, writing to stdout and stderr. It returns the command's error, to be
// mapped by exitCode.
func runEnv(ctx context.Context, args, env []string, stdout, stderr io.Writer) error {
	g := &globals{env: env, stdout: stdout, stderr: stderr, log: slog.New(slog.DiscardHandler)}
	root := newRootCommand(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return g.explain(root.ExecuteContext(ctx))
}

// explain adds to an error saying no supervisor answers which config file
// the command read (or that there was none) and where the socket's path
// came from: the usual cause is a command run with another config than
// the supervisor's. Any other error of a command that read no config
// file says so too (a forgotten --config reads as a broken box), and a
// lock held by another command says how to wait for it.
func (g *globals) explain(err error) error {
	switch {
	case err == nil || g.configFile == nil:
		return err
	case errors.Is(err, supervisor.ErrNotRunning):
		return fmt.Errorf("%w [socket %s: %s; %s]", err, g.socket, g.socketSource, g.configFile)
	case runtimeLockHeld(err) && !strings.Contains(err.Error(), "lock_wait"):
		err = fmt.Errorf("%w; wait for it to end, or let the command wait (install.lock_wait for hbx install and export, backup.lock_wait for the others)", err)
	}
	if !g.configFile.Read {
		return fmt.Errorf("%w [%s]", err, g.configFile)
	}
	return err
}

// runtimeLockHeld reports whether err is the runtime directory's lock
// (release.LockFile) held by another command, the lock install.lock_wait
// and backup.lock_wait wait for; not a second supervisor's or a box's.
func runtimeLockHeld(err error) bool {
	held, ok := errors.AsType[*lock.HeldError](err)
	return ok && filepath.Base(held.Path) == release.LockFile
}

// newRootCommand builds the command tree. Each subcommand lives in its own
// file and is registered here. Subcommands must not set PersistentPreRun(E):
// cobra would run theirs instead of the root's, which builds g.log.
func newRootCommand(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "hbx",
		Short: "Install and run the pinned Executor image natively",
		Long: `hbx installs a digest-pinned multi-platform OCI image (the Executor
Bun app) and runs it natively, without a container engine.

Configuration comes from flags, then HBX_* environment variables (for
example HBX_EXECUTOR_PORT), then the config file (--config, else the file
HBX_CONFIG names, else /etc/hbx/hbx.yaml when present), then built-in
defaults. "hbx config show" prints every effective value and its source.

` + exitCodesHelp,
		SilenceUsage:      true,
		SilenceErrors:     true,
		Args:              cobra.ArbitraryArgs, // cli.Group reports unknown commands as usage errors
		RunE:              cli.Group,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseEmptyFrom(cmd); err != nil {
				return err
			}
			log, err := cli.NewLogger(g.stderr, g.logLevel)
			if err != nil {
				return err
			}
			g.log = log
			cli.QuietImageLibrary(g.stderr, g.logLevel)
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.configPath, "config", config.DefaultPath, "config file (YAML; default: $"+config.ConfigEnv+" when set); a missing default file is fine, a missing named one is an error")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	config.RegisterFlags(pf)
	hideConfigKeyFlags(pf)
	root.SetUsageTemplate(usageTemplate(root.UsageTemplate()))
	root.SetFlagErrorFunc(cli.FlagError)

	root.AddCommand(
		newVersionCommand(g),
		newConfigCommand(g),
		newInstallCommand(g),
		newRunCommand(g),
		newSuperviseCommand(g),
		newStatusCommand(g),
		newLogsCommand(g),
		newShutdownCommand(g),
		newBackupCommand(g),
		newRestoreCommand(g),
		newHealthCommand(g),
		newUpgradeCommand(g),
		newRollbackCommand(g),
		newExportCommand(g),
		newResolveCommand(g),
		newHostboxCommand(g),
	)
	root.AddCommand(newStartStopCommands(g)...)
	return root
}

// box is cfg's box (srcs: where its values came from, nil when not
// known), asking for a backup passphrase on the controlling terminal.
func (g *globals) box(cfg *config.Config, srcs *config.Sources) adapters.Box {
	return adapters.New(cfg, srcs, g.configPath, g.log, openTTY)
}

// configured is the RunE of a command that needs the configuration: it
// loads it for cmd (loadConfig) and calls run with it.
func (g *globals) configured(run func(cmd *cobra.Command, args []string, cfg *config.Config, srcs *config.Sources) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		cfg, srcs, err := g.loadConfig(cmd)
		if err != nil {
			return err
		}
		return run(cmd, args, cfg, srcs)
	}
}

// loadConfig loads the configuration for cmd: the --config file, else the
// file HBX_CONFIG names (a missing file is an error then), else the
// default file if present; g's environment and the config-key flags the
// user set, and refuses paths others could replace (config.CheckTrust). It sets
// g.configPath to the file used. Errors wrap
// config.ErrInvalid unless the file exists but cannot be read.
func (g *globals) loadConfig(cmd *cobra.Command) (*config.Config, *config.Sources, error) {
	cfg, srcs, err := config.Load(config.LoadOptions{
		Path:         g.configPath,
		PathExplicit: cmd.Flags().Changed("config"),
		Env:          g.env,
		Flags:        cmd.Flags(),
	})
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.CheckTrust(srcs); err != nil { // StrictModes: refuse paths others could swap
		return nil, nil, err
	}
	f := srcs.File()
	g.configFile, g.configPath = &f, f.Path
	g.socket, g.socketSource = cfg.Supervisor.Socket, srcs.Of("supervisor.socket")
	return cfg, srcs, nil
}

// refuseEmptyFrom refuses --from "" (install, upgrade, restore): an empty
// PATH would silently mean the registry (issue 25 item 7).
func refuseEmptyFrom(cmd *cobra.Command) error {
	if f := cmd.Flags().Lookup("from"); f != nil && f.Changed && strings.TrimSpace(f.Value.String()) == "" {
		return cli.Usagef("%s: --from needs a PATH (an OCI image layout directory or OCI archive); leave --from out to read the registry", cmd.Name())
	}
	return nil
}

// configFlagsNote ends every command's help in place of the ~50 config-key
// flags, which every command accepts but which buried its own flags
// (kubectl's "kubectl options" does the same).
const configFlagsNote = `Every config key is also a flag on every command: --<section>-<key>
(executor.port is --executor-port). "hbx config flags" lists them.`

// hideConfigKeyFlags hides the config-key flags config.RegisterFlags put
// in fs from help: they keep working on every command, and "hbx config
// flags" lists them.
func hideConfigKeyFlags(fs *pflag.FlagSet) {
	for _, k := range config.Keys() {
		fs.Lookup(config.FlagName(k)).Hidden = true
	}
}

// usageTemplate is cobra's usage template tmpl with configFlagsNote after
// the flags. A cobra whose template no longer has the anchor gets the
// note at the end (TestHelpHidesConfigKeyFlags checks where it lands).
func usageTemplate(tmpl string) string {
	const anchor = "{{if .HasHelpSubCommands}}"
	note := "\n\n" + configFlagsNote
	if !strings.Contains(tmpl, anchor) {
		return strings.TrimSuffix(tmpl, "\n") + note + "\n"
	}
	return strings.Replace(tmpl, anchor, note+anchor, 1)
}
