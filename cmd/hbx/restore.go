package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/ui"
	"github.com/hermesbox/hbx/release"
)

// restoreOptions are the flags of `hbx restore`.
type restoreOptions struct {
	from           string // the runtime step reads the image from this OCI layout or archive
	dataOnly       bool
	withoutRuntime bool
	acceptImage    string
	json           bool
	command        string // the command line hints repeat (restoreCommand)
}

// restoreHelp is hbx restore's --help text.
const restoreHelp = `Restore replaces executor.data_dir (and the archive's extra paths) with
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
     install it (a failed install changes nothing); when it cannot be
     fetched (no network, registry down; never with --from) and no release is
     active, or with --without-runtime, go on: the data is restored, the
     release pinned, and nothing started until that runtime is installed
     (hbx install [--from FILE], then hbx supervise);
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
     and report;
  7. remove the releases neither current nor previous nor needed by a
     restore left not started, with their blobs, saying what was freed.

A journal (<data_dir>.restore.json) records each step before it happens,
so a restore that was killed is finished or undone (pin, data and runtime)
by the next hbx restore, hbx backup or hbx supervise. --json prints one JSON line per step and the result.

Exit status: 0 when the data is restored and the programs run (or no
supervisor runs); 3 when the data is restored but left NOT started,
awaiting the archive's runtime (step 4); 1 when the restore failed (the
old data is back), 2 for bad usage or configuration.

Which runtime an archive may bring back: only a release of
executor.image's repository (or its registry mirrors), never another. An
archive that is not authenticated (not encrypted with the box's
passphrase: a plain .tar.gz, hbx backup --no-encrypt) restores the data
directory only (--data-only for one with extra paths), every entry owned
by executor.user and no symlink leading out of it, and cannot change the runtime unless
--accept-image NAME:TAG@sha256:DIGEST names exactly the image it names.
hbx backup verify ARCHIVE says what a restore would change, or why it
would refuse.

--from PATH makes step 4 read the archive's runtime image from an OCI
image layout directory or OCI archive (hbx export, skopeo copy --all)
instead of the registry, checked by its digests as hbx install --from.`

// newRestoreCommand builds `hbx restore`.
func newRestoreCommand(g *globals) *cobra.Command {
	var o restoreOptions
	cmd := &cobra.Command{
		Use:   "restore ARCHIVE",
		Short: "Replace Executor's data with an archive's, atomically, health-checked",
		Long:  restoreHelp,
		Args:  cli.Args(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, srcs, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			if o.acceptImage != "" {
				if _, err := release.ParseImageRef(o.acceptImage); err != nil {
					return cli.Usagef("restore: --accept-image %s: want the full pinned image reference NAME:TAG@sha256:DIGEST, as the refusal names it (%w)", o.acceptImage, err)
				}
			}
			o.command = restoreCommand(cmd, args[0])
			return runRestore(cmd.Context(), g, cfg, srcs, args[0], o)
		},
	}
	cmd.Flags().StringVar(&o.from, "from", "", "install the archive's runtime from the OCI layout directory or OCI archive `PATH` instead of the registry")
	cmd.Flags().BoolVar(&o.dataOnly, "data-only", false, "restore the data directory only; leave the extra paths the archive holds (backup.paths when it was made) untouched")
	cmd.Flags().BoolVar(&o.withoutRuntime, "without-runtime", false, "when the archive's runtime cannot be fetched (no network, registry down; never with --from) while another release is active, restore the data anyway with the programs left stopped until that runtime is installed (automatic when no release is active)")
	cmd.Flags().StringVar(&o.acceptImage, "accept-image", "", "let an archive that is not encrypted with the box's passphrase change the runtime to exactly `NAME:TAG@sha256:DIGEST` (its repository must still be executor.image's or a mirror's)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print progress events and the result as JSON lines")
	return cmd
}

// runRestore replaces the data with archive's as hbx restore does: the
// owner (executor.user), the data held (the running supervisor's hold,
// else the data lock as "hbx restore"), then backup.Restore with the
// installer (reading from --from) and the config file; it prints what
// happened. The errors of the hold start with "restore: ", those of the
// restore with "restore ARCHIVE: ".
func runRestore(ctx context.Context, g *globals, cfg *config.Config, srcs *config.Sources, archive string, o restoreOptions) error {
	b := g.box(cfg, srcs)
	b.From = o.from
	owner, err := b.DataOwner(ctx)
	if err != nil {
		return err
	}
	opts := b.RestoreOptions(archive)
	opts.Owner, opts.DataOnly, opts.WithoutRuntime, opts.AcceptImage, opts.Command = owner, o.dataOnly, o.withoutRuntime, o.acceptImage, o.command
	svc, release, err := b.HoldData(ctx, "hbx restore")
	defer release()
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if svc != nil {
		opts.Services = svc
	}
	if o.json {
		opts.Progress = ui.NewJSONProgress(g.stdout)
	}
	res, err := backup.Restore(ctx, opts)
	if err != nil {
		return fmt.Errorf("restore %s: %w", archive, err)
	}
	res.Notes = append(res.Notes, pruneAfter(ctx, g, cfg, "hbx restore"))
	if o.json {
		err = ui.RestoreJSON(g.stdout, res)
	} else {
		_, err = io.WriteString(g.stdout, ui.RestoreText(res, archive, b.ConfigPath))
	}
	if err == nil && res.WithoutRuntime != "" {
		return &notStartedError{res.WithoutRuntime}
	}
	return err
}

// notStartedError is hbx restore's error when it restored the data but
// left the programs stopped, awaiting image (exit 3: done, not running).
type notStartedError struct{ image string }

func (e *notStartedError) Error() string {
	return "restored, not started: the data awaits runtime " + e.image
}

// restoreCommand is the hbx restore command line cmd runs, quoted for a
// shell, with every flag set on it but --accept-image and
// --without-runtime (which the hints that repeat it add as needed).
func restoreCommand(cmd *cobra.Command, archive string) string {
	words := []string{"hbx", "restore", backup.ShellWord(archive)}
	add := func(f *pflag.Flag) {
		switch {
		case f.Name == "accept-image" || f.Name == "without-runtime":
		case f.Value.Type() == "bool" && f.Value.String() == "true":
			words = append(words, "--"+f.Name)
		case f.Value.Type() == "bool":
			words = append(words, "--"+f.Name+"=false")
		default:
			words = append(words, "--"+f.Name, backup.ShellWord(f.Value.String()))
		}
	}
	cmd.Flags().Visit(add) // the parsed flags: its own and the inherited ones
	return strings.Join(words, " ")
}
