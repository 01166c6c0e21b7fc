package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
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

It extracts and checks the whole archive beside the data directory first
(a wrong passphrase or a damaged archive changes nothing), stops the
programs, installs the runtime the archive was written by when it is not
the active one, swaps the data in with one rename (the old data is kept
as <data_dir>.pre-restore-<time>), pins that release in the config file
when it is not the configured one,
then starts the programs and waits backup.health_wait for them; if they
fail, the old data is swapped back. A killed restore is finished or
undone by the next hbx restore, hbx backup or hbx supervise.

Exit status: 0 when the data is restored and the programs run (or no
supervisor runs); 3 when the data is restored but left NOT started,
awaiting the archive's runtime (it could not be fetched, or
--without-runtime: hbx install [--from FILE], then hbx supervise); 1 when
the restore failed (the old data is back), 2 for bad usage or
configuration.

An archive not encrypted with the box's passphrase restores the data
directory only, and changes the runtime only with --accept-image;
"hbx backup verify ARCHIVE" says what a restore would change. --from PATH
reads the runtime image from an OCI image layout directory or OCI archive
instead of the registry. --json prints one JSON line per step.

Steps, journal and archive trust: docs/backup.md#restore,
docs/backup.md#restore-without-a-runtime, docs/security.md#archive-trust.`

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
	// The archive named is checked before anything changes (DataOwner
	// may create executor.user): a missing one is a bad argument.
	if err := checkArchive(cfg, archive); err != nil {
		return cli.Usagef("restore %s: %w", archive, err)
	}
	if err := checkFrom("restore", o.from); err != nil {
		return err
	}
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

// checkArchive checks the archive a command is given
// (backup.CheckArchivePath) before anything changes. A relative name
// that is not in the working directory but is in backup.dir gets that
// path as a hint; any other missing archive, where `hbx backup list`
// shows the archives.
func checkArchive(cfg *config.Config, archive string) error {
	err := backup.CheckArchivePath(archive)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !filepath.IsAbs(archive) {
		in := filepath.Join(cfg.Backup.Dir, archive)
		if backup.CheckArchivePath(in) == nil {
			return fmt.Errorf("%w (did you mean %s? relative names are read from the working directory)", err, in)
		}
	}
	return fmt.Errorf("%w (hbx backup list shows the archives in backup.dir %s)", err, cfg.Backup.Dir)
}
