package adapters

// The options of `hbx backup`, `hbx restore`, `hbx backup list` and `hbx
// backup verify`, mapped from the configuration with the adapters they
// need (the installer for an archive's release, the config file's pin, the
// passphrase source); cmd/hbx composes each command from them and
// internal/ui renders its result.

import (
	"context"

	"github.com/hermesbox/hbx/internal/verbopts"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/buildinfo"
	"github.com/hermesbox/hbx/internal/executorrun"
	"github.com/hermesbox/hbx/internal/pinfile"
)

// BackupOptions are backup.Create's options for b's data as `hbx backup`
// makes an archive: the configuration's, this hbx's version, b's logger,
// the installer and the config file's pin. Encryption, the passphrase,
// the services and progress are the caller's.
func (b Box) BackupOptions() backup.Options {
	opts := verbopts.Backup(b.Config)
	opts.HbxVersion, opts.Logger = buildinfo.Version, b.Log
	opts.Runtime, opts.Config = installRuntime{cfg: b.Config, log: b.Log}, pinfile.File{Path: b.ConfigPath, Config: b.Config}
	return opts
}

// RestoreOptions are backup.Restore's options for archive as `hbx restore`
// restores it: the configuration's, the passphrase source (asked once),
// b's logger, and what decides the archive's release (the installer
// reading from b.From, the config file's pin with b.Sources, the allowed
// repositories). The owner, the services and the flags are the caller's.
func (b Box) RestoreOptions(archive string) backup.RestoreOptions {
	opts := verbopts.Restore(b.Config, archive)
	opts.Passphrase, opts.Logger = b.Passphrase(false), b.Log
	opts.Runtime = installRuntime{cfg: b.Config, log: b.Log, from: b.From}
	opts.Config = pinfile.File{Path: b.ConfigPath, Config: b.Config, Sources: b.Sources}
	opts.AllowedRepository = b.Config.RepositoryAllowed
	return opts
}

// DataOwner is the owner restored data gets: executor.user, created first
// when it is the dedicated user (account.Dedicated) and missing.
func (b Box) DataOwner(ctx context.Context) (backup.Owner, error) {
	if err := executorrun.EnsureUser(ctx, b.Config.Executor.User, b.Log); err != nil {
		return backup.Owner{}, err
	}
	return b.Owner(b.Config.Executor.User)
}
