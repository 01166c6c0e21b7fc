package backup

import (
	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/config"
)

// ConfiguredOptions are Create's options as cfg sets them: the data,
// extra, runtime, state and backup directories, the archive's name, keep
// and compression, the configured release (image, platform and its pinned
// manifest), the lock and health waits, encrypted. The caller adds the
// passphrase, services, runtime, config, logger and progress.
func ConfiguredOptions(cfg *config.Config) Options {
	return Options{
		DataDir:        cfg.Executor.DataDir,
		Paths:          cfg.Backup.Paths,
		RuntimeDir:     cfg.Executor.RuntimeDir,
		StateDir:       cfg.Executor.StateDir,
		Dir:            cfg.Backup.Dir,
		Name:           cfg.Backup.Name,
		Keep:           cfg.Backup.Keep,
		Compression:    Compression(cfg.Backup.Compression),
		Encrypt:        true,
		Image:          cfg.Executor.Image,
		Platform:       cfg.Executor.Platform,
		PlatformDigest: digest.Digest(cfg.PlatformPin()),
		LockWait:       cfg.Backup.LockWait,
		HealthWait:     cfg.Backup.HealthWait,
	}
}

// ConfiguredRestoreOptions are Restore's options for archive as cfg sets
// them: the data, runtime, state and backup directories, the allowed
// extra paths (backup.paths), how many pre-restore copies to keep, the
// health and lock waits, the configured image and platform and the
// repositories the box may run (config.Config.RepositoryAllowed). The
// caller adds the passphrase, owner, services, runtime, config, logger
// and progress.
func ConfiguredRestoreOptions(cfg *config.Config, archive string) RestoreOptions {
	return RestoreOptions{
		Archive:        archive,
		DataDir:        cfg.Executor.DataDir,
		RuntimeDir:     cfg.Executor.RuntimeDir,
		StateDir:       cfg.Executor.StateDir,
		BackupDir:      cfg.Backup.Dir,
		AllowedPaths:   cfg.Backup.Paths,
		KeepPreRestore: cfg.Backup.KeepPreRestore,
		HealthWait:     cfg.Backup.HealthWait,
		LockWait:       cfg.Backup.LockWait,
		Image:          cfg.Executor.Image,
		Platform:       cfg.Executor.Platform,
		// The box's own rule: executor.image's repository and its mirrors.
		AllowedRepository: cfg.RepositoryAllowed,
	}
}
