package box

// `hbx backup`, `hbx restore`, `hbx backup list` and `hbx backup verify`
// composed from the configuration (package backup, the supervisor's
// services, the data lock, the installer and the config file); their
// results are rendered by internal/ui.

import (
	"context"
	"fmt"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/buildinfo"
	"github.com/hermesbox/hbx/internal/pinfile"
)

// BackupRequest is what `hbx backup` asks of Box.Backup.
type BackupRequest struct {
	NoEncrypt bool            // write a plaintext archive
	Progress  backup.Progress // nil: none
}

// BackupOutcome is what Box.Backup made.
type BackupOutcome struct {
	*backup.Result
	// Supervised says whether a supervisor ran (and its programs were
	// stopped and started again).
	Supervised bool
}

// Backup makes one archive of b's data as `hbx backup` does: the
// passphrase (confirmed on a terminal) unless r.NoEncrypt, the data held
// (the running supervisor's hold, else the data lock as "hbx backup"),
// then backup.Create. Errors start with "backup: "; the outcome is not
// nil when Create returned a result, also with an error (its Skipped
// entries are worth a warning).
func (b Box) Backup(ctx context.Context, r BackupRequest) (*BackupOutcome, error) {
	opts := backupOptions(b.Config)
	opts.Encrypt, opts.HbxVersion, opts.Logger = !r.NoEncrypt, buildinfo.Version, b.Log
	opts.Runtime, opts.Config = installRuntime{cfg: b.Config, log: b.Log}, pinfile.File{Path: b.ConfigPath, Config: b.Config}
	if !r.NoEncrypt {
		p, err := b.passphrase(true)()
		if err != nil {
			return nil, fmt.Errorf("backup: %w", err)
		}
		opts.Passphrase = p
	}
	svc, release, err := b.holdData(ctx, "hbx backup")
	defer release()
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if svc != nil {
		opts.Services = svc
	}
	if r.Progress != nil {
		opts.Progress = r.Progress
	}
	res, err := backup.Create(ctx, opts)
	var out *BackupOutcome
	if res != nil {
		out = &BackupOutcome{Result: res, Supervised: svc != nil}
	}
	if err != nil {
		return out, fmt.Errorf("backup: %w", err)
	}
	return out, nil
}

// RestoreRequest is what `hbx restore` asks of Box.Restore.
type RestoreRequest struct {
	Archive  string
	DataOnly bool // leave the archive's extra paths untouched
	// WithoutRuntime restores the data with the programs left stopped
	// when the archive's runtime cannot be fetched while another release
	// is active (backup.RestoreOptions.WithoutRuntime).
	WithoutRuntime bool
	// AcceptImage lets an archive that is not authenticated change the
	// runtime to exactly this image (backup.RestoreOptions.AcceptImage).
	AcceptImage string
	// Command is the command line to repeat in hints
	// (backup.RestoreOptions.Command); "" is hbx restore ARCHIVE.
	Command  string
	Progress backup.Progress // nil: none
}

// RestoreOutcome is what Box.Restore did.
type RestoreOutcome struct {
	*backup.RestoreResult
	Archive    string // the archive restored
	ConfigPath string // the config file a pin was written to
}

// Restore replaces b's data with r.Archive's as `hbx restore` does: the
// owner (executor.user), the data held (the running supervisor's hold,
// else the data lock as "hbx restore"), then backup.Restore with the
// installer and b's config file. The errors of the hold start with
// "restore: ", those of the restore with "restore ARCHIVE: ".
func (b Box) Restore(ctx context.Context, r RestoreRequest) (*RestoreOutcome, error) {
	if err := ensureExecutorUser(ctx, b.Config, b.Log); err != nil {
		return nil, err
	}
	owner, err := b.Owner(b.Config.Executor.User)
	if err != nil {
		return nil, err
	}
	opts := restoreOptions(b.Config, r.Archive)
	opts.Passphrase, opts.DataOnly, opts.Owner, opts.Logger = b.passphrase(false), r.DataOnly, owner, b.Log
	opts.WithoutRuntime, opts.AcceptImage, opts.Command = r.WithoutRuntime, r.AcceptImage, r.Command
	b.restoreRelease(&opts)
	svc, release, err := b.holdData(ctx, "hbx restore")
	defer release()
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if svc != nil {
		opts.Services = svc
	}
	if r.Progress != nil {
		opts.Progress = r.Progress
	}
	res, err := backup.Restore(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", r.Archive, err)
	}
	return &RestoreOutcome{RestoreResult: res, Archive: r.Archive, ConfigPath: b.ConfigPath}, nil
}

// BackupListing is what `hbx backup list` shows: the archives of
// backup.dir (backup.name's and pre-upgrade ones) and the kept copies of
// replaced data beside executor.data_dir, each newest first.
type BackupListing struct {
	Archives []backup.Listed
	Kept     []backup.Kept
}

// BackupList lists b's archives and kept copies; errors start with
// "backup list: ".
func (b Box) BackupList() (*BackupListing, error) {
	list, err := backup.ListKinds(b.Config.Backup.Dir, b.Config.Backup.Name, preUpgradeName)
	if err != nil {
		return nil, fmt.Errorf("backup list: %w", err)
	}
	kept, err := backup.ListKept(b.Config.Executor.DataDir)
	if err != nil {
		return nil, fmt.Errorf("backup list: %w", err)
	}
	return &BackupListing{Archives: list, Kept: kept}, nil
}

// restoreRelease sets what decides a restore's release in opts: the
// installer, the config file's pin, the box's repositories.
func (b Box) restoreRelease(opts *backup.RestoreOptions) {
	opts.Runtime = installRuntime{cfg: b.Config, log: b.Log, from: b.From}
	opts.Config = pinfile.File{Path: b.ConfigPath, Config: b.Config, Sources: b.Sources}
	opts.AllowedRepository = b.Config.RepositoryAllowed
}

// Verified is what `hbx backup verify` found in an archive, and what
// `hbx restore` of it would change (backup.PlanRestore).
type Verified struct {
	*backup.VerifyResult
	Restore *backup.RestorePlan
}

// Verify checks archive against its manifest (backup.Verify) with b's
// passphrase source, and says what restoring it would change; errors
// start with "backup verify: ARCHIVE: ".
func (b Box) Verify(ctx context.Context, archive string) (*Verified, error) {
	res, err := backup.Verify(ctx, archive, b.passphrase(false))
	if err != nil {
		return nil, fmt.Errorf("backup verify: %s: %w", archive, err)
	}
	opts := restoreOptions(b.Config, archive)
	b.restoreRelease(&opts)
	if b.Owner != nil {
		if owner, err := b.Owner(b.Config.Executor.User); err == nil {
			opts.Owner = owner
		}
	}
	return &Verified{VerifyResult: res, Restore: backup.PlanVerified(opts, res)}, nil
}
