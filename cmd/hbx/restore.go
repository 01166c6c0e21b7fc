package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/units"
	"github.com/hermesbox/hbx/supervisor"
)

// restoreOptions are the flags of `hbx restore`.
type restoreOptions struct {
	dataOnly bool
	json     bool
}

// newRestoreCommand builds `hbx restore`.
func newRestoreCommand(g *globals) *cobra.Command {
	var o restoreOptions
	cmd := &cobra.Command{
		Use:   "restore ARCHIVE",
		Short: "Replace Executor's data with an archive's, atomically, health-checked",
		Long: `Restore replaces executor.data_dir (and the archive's extra paths) with
the content of ARCHIVE: one "hbx backup" wrote, or a plain
"tar -czf - -C DATA . [| gpg --symmetric]" (then nothing can be checked
against a manifest, and the output says so).

  1. take the lock backup and install take; finish or undo an interrupted
     restore;
  2. decrypt, decompress and extract into <data_dir>.restore-<time> beside
     the data directory, with the installer's traversal-safe extractor,
     checking every entry against the manifest; a wrong passphrase, a
     damaged archive or a mismatch stops here with nothing changed;
  3. stop the supervised programs (or, without a supervisor, hold the data
     directory's lock, refusing beside "hbx run executor", and refuse if a
     process holds files in the data directory);
  4. when the runtime the archive was written by is not the active one,
     install it (a failed install changes nothing);
  5. swap the staged tree and the data directory with one
     renameat2(RENAME_EXCHANGE); the old data is kept as
     <data_dir>.pre-restore-<time> (backup.keep_pre_restore copies); the
     data directory is mode 0700, owned by executor.user; when the archive
     was written by another release than the configured one, pin that
     release in the config file as hbx upgrade does (refused before step 2
     without a config file, or while an HBX_* variable or a flag sets
     executor.image or executor.platform_digests);
  6. start the programs and wait (backup.health_wait) for /api/health and
     every program RUNNING; if they fail, swap the old data back, restart,
     and report.

A journal (<data_dir>.restore.json) records each step before it happens,
so a restore that was killed is finished or undone (pin, data and runtime)
by the next hbx restore, hbx backup or hbx supervise. --json prints one JSON line per step and the result.`,
		Args: wantArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, srcs, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			return runRestore(cmd.Context(), g, cfg, srcs, args[0], o)
		},
	}
	cmd.Flags().BoolVar(&o.dataOnly, "data-only", false, "restore the data directory only; leave the extra paths the archive holds (backup.paths when it was made) untouched")
	cmd.Flags().BoolVar(&o.json, "json", false, "print progress events and the result as JSON lines")
	return cmd
}

// runRestore restores archive and prints what happened.
func runRestore(ctx context.Context, g *globals, cfg *config.Config, srcs *config.Sources, archive string, o restoreOptions) error {
	owner, err := lookupOwner(cfg.Executor.User)
	if err != nil {
		return err
	}
	opts := backup.ConfiguredRestoreOptions(cfg, archive)
	opts.Passphrase, opts.DataOnly, opts.Owner, opts.Logger = passphrase(cfg, false), o.dataOnly, owner, g.log
	opts.Runtime, opts.Config = installRuntime{g: g, cfg: cfg}, restorePinner{g: g, cfg: cfg, srcs: srcs}
	svc, release, err := holdData(ctx, g, cfg, "hbx restore")
	defer release()
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if svc != nil {
		opts.Services = svc
	}
	if o.json {
		opts.Progress = newBackupJSONProgress(g.stdout)
	}
	res, err := backup.Restore(ctx, opts)
	if err != nil {
		return fmt.Errorf("restore %s: %w", archive, err)
	}
	if o.json {
		return json.NewEncoder(g.stdout).Encode(struct {
			Event string `json:"event"`
			*backup.RestoreResult
			DurationMS int64 `json:"duration_ms"`
		}{"result", res, res.Duration.Milliseconds()})
	}
	return printRestore(g.stdout, archive, g.configPath, res)
}

// printRestore prints what a restore of archive did; configPath is the
// config file a pin was written to.
func printRestore(w io.Writer, archive, configPath string, res *backup.RestoreResult) error {
	var b strings.Builder
	fmt.Fprintf(&b, "restored %s: %d files (%s) in %s\n", archive, res.Files, units.Bytes(res.Bytes), res.Duration.Round(time.Millisecond))
	for _, t := range slices.Sorted(maps.Keys(res.Restored)) {
		if old := res.Restored[t]; old != "" {
			fmt.Fprintf(&b, "  %s replaced; the previous content is in %s\n", t, old)
		} else {
			fmt.Fprintf(&b, "  %s restored\n", t)
		}
	}
	if res.RuntimeChanged {
		b.WriteString("  installed the runtime the archive was written by\n")
	}
	if res.Pinned != "" {
		fmt.Fprintf(&b, "  pinned %s in %s (it named %s)\n", res.Pinned, configPath, res.PinnedOver)
	}
	if res.Healthy {
		b.WriteString("  services running and healthy\n")
	}
	if res.Recovered != "" {
		fmt.Fprintf(&b, "  first %s\n", res.Recovered)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// lookupOwner resolves executor.user to a numeric owner.
func lookupOwner(name string) (backup.Owner, error) {
	uid, gid, err := account.IDs(name)
	if err != nil {
		return backup.Owner{}, fmt.Errorf("%w: executor.user: %w", config.ErrInvalid, err)
	}
	return backup.Owner{UID: uid, GID: gid}, nil
}

// recoverRestore finishes or undoes an interrupted restore before `hbx
// supervise` starts the programs. With a supervisor already answering (this
// one is about to refuse to start), it does nothing.
func recoverRestore(ctx context.Context, g *globals, cfg *config.Config) {
	if _, err := supervisor.Dial(ctx, cfg.Supervisor.Socket); err == nil {
		return
	}
	msg, err := backup.Recover(ctx, recoverOptions(g, cfg, nil, nil))
	switch {
	case err != nil:
		g.log.Error("an interrupted restore could not be recovered; starting the programs anyway", "err", err)
	case msg != "":
		g.log.Warn("interrupted restore recovered", "what", msg)
	}
}

// recoverOptions are backup.Recover's options for cfg (srcs: nil when not
// known; svc: the running supervisor, nil when none runs).
func recoverOptions(g *globals, cfg *config.Config, srcs *config.Sources, svc *supervisorServices) backup.RecoverOptions {
	opts := backup.RecoverOptions{
		DataDir:    cfg.Executor.DataDir,
		RuntimeDir: cfg.Executor.RuntimeDir,
		Runtime:    installRuntime{g: g, cfg: cfg},
		Config:     restorePinner{g: g, cfg: cfg, srcs: srcs},
		Logger:     g.log,
	}
	if svc != nil {
		opts.Services = svc
	}
	return opts
}

// restorePinner is backup.Config over the --config file
// (backup.ConfigFile).
type restorePinner struct {
	g    *globals
	cfg  *config.Config
	srcs *config.Sources // nil: not known (recovery)
}

func (p restorePinner) file() backup.ConfigFile {
	return backup.ConfigFile{Path: p.g.configPath, Config: p.cfg, Sources: p.srcs}
}

func (p restorePinner) Pinned() (string, digest.Digest, error)  { return p.file().Pinned() }
func (p restorePinner) CanPin() error                           { return p.file().CanPin() }
func (p restorePinner) Pin(image string, m digest.Digest) error { return p.file().Pin(image, m) }

// recoverRestoreFor undoes or finishes an interrupted restore before an
// upgrade or rollback (svc: the running supervisor, nil when none runs).
// What it did is logged.
func recoverRestoreFor(ctx context.Context, g *globals, cfg *config.Config, srcs *config.Sources, svc *supervisorServices) error {
	if _, err := backup.Recover(ctx, recoverOptions(g, cfg, srcs, svc)); err != nil {
		return fmt.Errorf("recover an interrupted restore: %w", err)
	}
	return nil
}
