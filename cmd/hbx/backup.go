package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/adapters"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/ui"
)

// backupOptions are the flags of `hbx backup`.
type backupOptions struct {
	noEncrypt bool
	json      bool
}

// newBackupCommand builds `hbx backup` and its subcommands.
func newBackupCommand(g *globals) *cobra.Command {
	var o backupOptions
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Make a cold, encrypted, verified backup of Executor's data",
		Long: `Backup archives executor.data_dir (and backup.paths) while the supervised
programs are stopped, so the database and keys are never torn: it stops
the programs (without a supervisor, it holds the data directory's lock
and refuses while a process holds files in it), writes a tar with a
manifest of every file's sha256, compressed (backup.compression) and
encrypted with OpenPGP (AES-256, the passphrase from
backup.passphrase_file's first line or asked on the terminal) to
backup.dir/<name>-<UTC time>.tar.gz.gpg (mode 0600, a .sha256 beside it),
starts the programs again and waits (backup.health_wait) for them, reads
the archive back against its manifest and removes archives beyond
backup.keep.

Any failure prints one line, exits 1, removes the partial archive and
starts the programs again, naming them; so does a program that does not
run again. "gpg --decrypt ARCHIVE | tar -xz" reads the archives. The
runtime directory and executor.state_dir are never archived.
--no-encrypt writes a plaintext .tar.gz (the archive holds Executor's
credentials). --json prints one JSON line per step and the result.

Steps, archive format and passphrase rules: docs/backup.md#backing-up,
docs/backup.md#the-archive-format, docs/backup.md#the-passphrase.`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			return runBackup(cmd.Context(), g, cfg, o)
		},
	}
	cmd.Flags().BoolVar(&o.noEncrypt, "no-encrypt", false, "write a plaintext .tar.gz (not recommended: it holds credentials)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print progress events and the result as JSON lines")
	cmd.AddCommand(newBackupListCommand(g), newBackupVerifyCommand(g))
	return cmd
}

// runBackup makes one archive as hbx backup does: the passphrase
// (confirmed on a terminal) unless --no-encrypt, the data held (the
// running supervisor's hold, else the data lock as "hbx backup"), then
// backup.Create; it prints where the archive is. Skipped entries get a
// warning also when Create failed.
func runBackup(ctx context.Context, g *globals, cfg *config.Config, o backupOptions) error {
	if o.noEncrypt {
		fmt.Fprintln(g.stderr, "hbx: warning: --no-encrypt: the archive will hold Executor's database and encryption keys in plaintext")
	}
	b := g.box(cfg, nil)
	opts := b.BackupOptions()
	opts.Encrypt = !o.noEncrypt
	if opts.Encrypt {
		p, err := b.Passphrase(true)()
		if err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		opts.Passphrase = p
	}
	svc, release, err := b.HoldData(ctx, "hbx backup")
	defer release()
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if svc != nil {
		opts.Services = svc
	}
	if o.json {
		opts.Progress = ui.NewJSONProgress(g.stdout)
	}
	res, err := backup.Create(ctx, opts)
	if res != nil {
		for _, s := range res.Skipped {
			fmt.Fprintf(g.stderr, "hbx: warning: not archived: %s\n", s)
		}
	}
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if o.json {
		return ui.BackupJSON(g.stdout, res)
	}
	_, err = io.WriteString(g.stdout, ui.BackupText(res, svc != nil))
	return err
}

// newBackupListCommand builds `hbx backup list`.
func newBackupListCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the archives in backup.dir, newest first",
		Long: `List prints one line per archive of backup.dir (backup.name's and
pre-upgrade ones), then one line per copy of replaced data kept beside
executor.data_dir (pre-restore, rolled-back), each newest first; --json
prints one JSON array of both, each with its "kind". What each column
means and how to bring a kept copy back: docs/backup.md#listing-backups.`,
		Args: cli.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			if !g.configFile.Read {
				// An empty list would read as "no backups" when the
				// operator forgot --config.
				fmt.Fprintf(g.stderr, "hbx: note: %s: listing backup.dir %s\n", g.configFile, cfg.Backup.Dir)
			}
			return runBackupList(g.stdout, cfg, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// runBackupList prints the archives of backup.dir (backup.name's and
// pre-upgrade ones) and the kept copies of replaced data beside
// executor.data_dir, each newest first.
func runBackupList(w io.Writer, cfg *config.Config, asJSON bool) error {
	list, err := backup.ListKinds(cfg.Backup.Dir, cfg.Backup.Name, adapters.PreUpgradeName)
	if err != nil {
		return fmt.Errorf("backup list: %w", err)
	}
	kept, err := backup.ListKept(cfg.Executor.DataDir)
	if err != nil {
		return fmt.Errorf("backup list: %w", err)
	}
	if asJSON {
		return ui.ListJSON(w, list, kept)
	}
	return ui.ListText(w, list, kept)
}

// newBackupVerifyCommand builds `hbx backup verify`.
func newBackupVerifyCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "verify ARCHIVE",
		Short: "Check an archive against its manifest without writing anything",
		Long: `Verify decrypts (asking for the passphrase as backup does), decompresses
and reads ARCHIVE to its end, and checks every entry against the manifest:
type, mode, size, link target and sha256; that every listed entry is
there and nothing else is; the OpenPGP integrity check, the compression's
checksum and the .sha256 file beside it. It writes nothing. Exit status 0
when everything matches, 1 naming the first bad entry otherwise. An
archive without a manifest (tar -czf ... | gpg --symmetric) is read to its
end and the output says what could not be checked. Then it says what hbx
restore of the archive would change: the runtime (the image it would
install and pin), the directories it would replace and their owners, or
why it would refuse the archive; and whether the archive is
authenticated (encrypted with the box's passphrase).`,
		Args: cli.Args(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, _, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			return runBackupVerify(cmd.Context(), g, cfg, args[0], asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// runBackupVerify checks archive against its manifest (backup.Verify) and
// prints what it found and what hbx restore of it would change
// (backup.PlanVerified).
func runBackupVerify(ctx context.Context, g *globals, cfg *config.Config, archive string, asJSON bool) error {
	if err := checkArchive(cfg, archive); err != nil {
		return cli.Usagef("backup verify: %s: %w", archive, err)
	}
	b := g.box(cfg, nil)
	res, err := backup.Verify(ctx, archive, b.Passphrase(false))
	if err != nil {
		return fmt.Errorf("backup verify: %s: %w", archive, err)
	}
	opts := b.RestoreOptions(archive)
	if owner, err := b.Owner(cfg.Executor.User); err == nil {
		opts.Owner = owner
	}
	plan := backup.PlanVerified(opts, res)
	if asJSON {
		return ui.VerifyJSON(g.stdout, res, plan)
	}
	_, err = io.WriteString(g.stdout, ui.VerifyText(res, plan))
	return err
}

// tty is backup.Terminal on the controlling terminal.
type tty struct{ f *os.File }

func openTTY() (backup.Terminal, func(), error) {
	f, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	return tty{f}, func() { f.Close() }, nil
}

func (t tty) Ask(prompt string) ([]byte, error) {
	fmt.Fprint(t.f, prompt)
	p, err := term.ReadPassword(int(t.f.Fd()))
	fmt.Fprintln(t.f)
	if err != nil {
		return nil, fmt.Errorf("read passphrase: %w", err)
	}
	return p, nil
}
