package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/launch"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/upgrade"
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
		Args:      cobra.MatchAll(wantArgs(1, 1), runProgramArg),
		ValidArgs: []string{"executor"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			// One writer per data directory: refuse beside a supervisor or
			// another run, before anything starts; stop what a dead owner
			// left. The payload inherits the lock.
			dl, err := lockData(cmd.Context(), g, cfg, "hbx run executor", true)
			if err != nil {
				return fmt.Errorf("run executor: %w", err)
			}
			defer dl.Release()
			spec, err := prepareLaunch(cmd.Context(), launchOptions(cfg, release.DefaultHostPath), g.log)
			if err != nil {
				return err
			}
			logTightened(g, spec)
			spec.ExtraFiles = []*os.File{dl.File()}
			return launch.Run(cmd.Context(), spec, g.stdout, g.stderr, g.log)
		},
	}
}

// prepareLaunch is launch.Prepare, except that where Prepare says "run
// `hbx install` first" while a restore is half done (<data_dir>.restore.json
// in phase staging or swapping) or an upgrade is (upgrade.json in a phase
// other than done, rolled-back or aborted), the error names the interrupted
// change and the commands that finish or undo it instead: hbx install
// would put a runtime on data of another release. A release an earlier hbx
// installed with the image's owners is made root's alone before it runs
// (installer.FixOwnership).
func prepareLaunch(ctx context.Context, lo launch.Options, log *slog.Logger) (*launch.Spec, error) {
	spec, err := launch.Prepare(lo)
	if err == nil {
		if err := installer.FixOwnership(ctx, lo.RuntimeDir, time.Minute, log); err != nil {
			return nil, fmt.Errorf("run executor: %w", err)
		}
		return spec, nil
	}
	if !errors.Is(err, launch.ErrNotInstalled) {
		return spec, err
	}
	cause := err
	if m, ok := err.(interface{ Unwrap() []error }); ok {
		if errs := m.Unwrap(); len(errs) == 2 && errs[0] == launch.ErrNotInstalled {
			cause = errs[1]
		}
	}
	// A restore switches the runtime and the pin with the data: one
	// half done is undone (runtime and pin included) by its recovery.
	if r, rerr := backup.ReadPendingRestore(lo.DataDir); rerr == nil && r != nil && r.Unfinished() {
		return nil, fmt.Errorf("%w: the restore of %s was interrupted in phase %s (started %s; %s); do not run hbx install, which changes the runtime without the data that goes with it: run `hbx backup`, or restart `hbx supervise`, which undo it first (runtime, pin and data together): %w",
			errRestoreInterrupted, r.Archive, r.Phase, r.Started.Format(time.RFC3339), r.Journal, cause)
	}
	j, jerr := upgrade.ReadJournal(lo.RuntimeDir)
	if jerr != nil || j == nil || !j.Pending() {
		return nil, err
	}
	by := j.By
	if by == "" {
		by = "hbx upgrade"
	}
	return nil, fmt.Errorf("%w: the release change (%s) from %s to %s was interrupted in phase %s (%s); do not run hbx install, which changes the runtime without the data that goes with it: run `hbx rollback` to undo it, or restart `hbx supervise`, which undoes it first: %w",
		errUpgradeInterrupted, by, j.Old.Image, j.New.Image, j.Phase, filepath.Join(lo.RuntimeDir, upgrade.JournalFile), cause)
}

// logTightened logs, one line each, the data and state directories
// launch.Prepare made 0700 and executor.user's.
func logTightened(g *globals, spec *launch.Spec) {
	for _, t := range spec.Tightened {
		g.log.Warn("directory made private to executor.user", "change", t)
	}
}

// errUpgradeInterrupted: the executor cannot start because an upgrade is
// half done (prepareLaunch).
var errUpgradeInterrupted = errors.New("an upgrade is half done")

// errRestoreInterrupted: the executor cannot start because a restore is
// half done (prepareLaunch).
var errRestoreInterrupted = errors.New("a restore is half done")

// launchOptions maps the configuration onto the payload's run options.
func launchOptions(cfg *config.Config, hostPath string) launch.Options {
	ref, _ := config.ParseImageRef(cfg.Executor.Image) // validated by Load
	return launch.Options{
		RuntimeDir:        cfg.Executor.RuntimeDir,
		DataDir:           cfg.Executor.DataDir,
		StateDir:          cfg.Executor.StateDir,
		User:              cfg.Executor.User,
		EnvFile:           cfg.Executor.EnvFile,
		TokenFile:         cfg.Executor.TokenFile,
		TokenEnv:          cfg.Executor.TokenEnv,
		Listen:            cfg.Executor.Listen,
		Port:              cfg.Executor.Port,
		HostPort:          cfg.Executor.HostPort,
		AllowLocalNetwork: cfg.Executor.AllowLocalNetwork,
		DisableIPv6:       cfg.Executor.DisableIPv6,
		IndexDigest:       ref.Digest,
		Platform:          cfg.Executor.Platform,
		ManifestPin:       platformPin(cfg),
		HostPath:          hostPath,
	}
}

// runProgramArg refuses a program name other than "executor", the one
// program hbx run runs, with a "did you mean" when the name is near it.
func runProgramArg(_ *cobra.Command, args []string) error {
	if len(args) == 1 && args[0] != "executor" {
		hint := ""
		if c := config.Closest(args[0], []string{"executor"}); c != "" {
			hint = fmt.Sprintf("; did you mean %q?", c)
		}
		return usageErrorf("run: no such program: %q (hbx run runs executor only%s)", args[0], hint)
	}
	return nil
}
