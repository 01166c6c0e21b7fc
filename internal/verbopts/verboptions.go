package verbopts

import (
	"log/slog"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/export"
)

// Backup is backup.Create's options as cfg sets them: the data,
// extra, runtime, state and backup directories, the archive's name, keep
// and compression, the configured release (image, platform and its pinned
// manifest), the lock and health waits, encrypted. The caller adds the
// passphrase, services, runtime, config, logger and progress.
func Backup(cfg *config.Config) backup.Options {
	return backup.Options{
		DataDir:        cfg.Executor.DataDir,
		Paths:          cfg.Backup.Paths,
		RuntimeDir:     cfg.Executor.RuntimeDir,
		StateDir:       cfg.Executor.StateDir,
		Dir:            cfg.Backup.Dir,
		Name:           cfg.Backup.Name,
		Keep:           cfg.Backup.Keep,
		Compression:    backup.Compression(cfg.Backup.Compression),
		Encrypt:        true,
		Image:          cfg.Executor.Image,
		Platform:       cfg.Executor.Platform,
		PlatformDigest: digest.Digest(cfg.PlatformPin()),
		LockWait:       cfg.Backup.LockWait,
		HealthWait:     cfg.Backup.HealthWait,
	}
}

// Restore is backup.Restore's options for archive as cfg sets
// them: the data, runtime, state and backup directories, the allowed
// extra paths (backup.paths), how many pre-restore copies to keep, the
// health and lock waits, the configured image and platform and the
// repositories the box may run (config.Config.RepositoryAllowed). The
// caller adds the passphrase, owner, services, runtime, config, logger
// and progress.
func Restore(cfg *config.Config, archive string) backup.RestoreOptions {
	return backup.RestoreOptions{
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

// Recover is backup.Recover's options as cfg sets them: the data
// and runtime directories. The caller adds the runtime, config, services
// and logger.
func Recover(cfg *config.Config) backup.RecoverOptions {
	return backup.RecoverOptions{DataDir: cfg.Executor.DataDir, RuntimeDir: cfg.Executor.RuntimeDir}
}

// Export is export.Export's options as cfg sets them: the runtime
// directory, its lock wait (install.lock_wait) and install.keep_blobs;
// log is told of a wait for the lock.
func Export(cfg *config.Config, log *slog.Logger) export.Options {
	return export.Options{RuntimeDir: cfg.Executor.RuntimeDir, LockWait: cfg.Install.LockWait, KeepBlobs: cfg.Install.KeepBlobs, Logger: log}
}

// KeptDirs are the directories hbx keeps, by config key, where
// export.CheckTarget refuses an export FILE.
func KeptDirs(cfg *config.Config) []export.Dir {
	return []export.Dir{
		{Key: "executor.runtime_dir", Dir: cfg.Executor.RuntimeDir}, {Key: "executor.data_dir", Dir: cfg.Executor.DataDir},
		{Key: "executor.state_dir", Dir: cfg.Executor.StateDir}, {Key: "backup.dir", Dir: cfg.Backup.Dir},
	}
}
