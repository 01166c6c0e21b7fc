package box

import (
	"log/slog"
	"maps"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/export"
	"github.com/hermesbox/hbx/internal/pinfile"
	"github.com/hermesbox/hbx/upgrade"
)

// backupOptions are backup.Create's options as cfg sets them: the data,
// extra, runtime, state and backup directories, the archive's name, keep
// and compression, the configured release (image, platform and its pinned
// manifest), the lock and health waits, encrypted. The caller adds the
// passphrase, services, runtime, config, logger and progress.
func backupOptions(cfg *config.Config) backup.Options {
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

// restoreOptions are backup.Restore's options for archive as cfg sets
// them: the data, runtime, state and backup directories, the allowed
// extra paths (backup.paths), how many pre-restore copies to keep, the
// health and lock waits, the configured image and platform and the
// repositories the box may run (config.Config.RepositoryAllowed). The
// caller adds the passphrase, owner, services, runtime, config, logger
// and progress.
func restoreOptions(cfg *config.Config, archive string) backup.RestoreOptions {
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

// recoverOptions are backup.Recover's options as cfg sets them: the data
// and runtime directories. The caller adds the runtime, config, services
// and logger.
func recoverOptions(cfg *config.Config) backup.RecoverOptions {
	return backup.RecoverOptions{DataDir: cfg.Executor.DataDir, RuntimeDir: cfg.Executor.RuntimeDir}
}

// toolsIn is the MCP tool set in force once r is pinned: r's (the default
// when r pins none), or cfg's when r records none or an HBX_* variable or
// a flag sets health.mcp_tools (overridden).
func toolsIn(cfg *config.Config, r upgrade.Release, overridden bool) []string {
	switch {
	case overridden || r.MCPTools == nil:
		return cfg.Health.MCPTools
	case r.MCPTools.Names == nil:
		return config.Defaults().Health.MCPTools
	}
	return r.MCPTools.Names
}

// withPin is cfg with r as executor.image and its platform pin; cfg is
// not changed.
func withPin(cfg *config.Config, r upgrade.Release) *config.Config {
	c := *cfg
	c.Executor.Image = r.Image
	c.Executor.PlatformDigests = maps.Clone(cfg.Executor.PlatformDigests)
	if c.Executor.PlatformDigests == nil {
		c.Executor.PlatformDigests = map[string]string{}
	}
	c.Executor.PlatformDigests[cfg.PinKey()] = r.ManifestDigest.String()
	return &c
}

// gateChecks names the health checks that gate a release change once cfg
// (withPin) is in force, in order: health.readiness (api-health by
// default), mcp-auth, supervisor, release, and mcp-tools when a key is
// configured (health.token_file) and readiness is not already mcp-tools.
func gateChecks(cfg *config.Config) []string {
	names := []string{cfg.Health.Readiness, "mcp-auth", "supervisor", "release"}
	if cfg.Health.TokenFile != "" && cfg.Health.Readiness != "mcp-tools" {
		names = append(names, "mcp-tools")
	}
	return names
}

// releasePin is upgrade.Config over the config file (pinfile.File).
type releasePin struct{ pinfile.File }

// Pin implements upgrade.Config: r's image and manifest, and its tool
// set unless r.MCPTools is nil, in one write.
func (p releasePin) Pin(r upgrade.Release) (string, error) {
	tools := config.PinTools{Keep: true}
	if r.MCPTools != nil {
		tools = config.PinTools{Names: r.MCPTools.Names}
	}
	return p.PinRelease(r.Image, r.ManifestDigest, tools)
}

// ExportOptions are export.Export's options as cfg sets them: the runtime
// directory, its lock wait (install.lock_wait) and install.keep_blobs;
// log is told of a wait for the lock.
func ExportOptions(cfg *config.Config, log *slog.Logger) export.Options {
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
