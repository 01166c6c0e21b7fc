package verbopts

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/buildinfo"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/executorrun"
	"github.com/hermesbox/hbx/internal/pending"
	"github.com/hermesbox/hbx/internal/suggest"
	"github.com/hermesbox/hbx/internal/supervisorclient"
	"github.com/hermesbox/hbx/launch"
	"github.com/hermesbox/hbx/release"
)

// Launch maps the configuration onto the payload's run options;
// hostPath is the PATH the payload gets (release.DefaultHostPath: never
// the caller's).
func Launch(cfg *config.Config, hostPath string) launch.Options {
	return launch.Options{
		RuntimeDir:        cfg.Executor.RuntimeDir,
		DataDir:           cfg.Executor.DataDir,
		StateDir:          cfg.Executor.StateDir,
		User:              cfg.Executor.User,
		EnvFile:           cfg.Executor.EnvFile,
		TokenFile:         cfg.Executor.TokenFile,
		TokenEnv:          cfg.Executor.TokenEnv,
		Listen:            cfg.Executor.Listen,
		Network:           cfg.Executor.Exposure == config.ExposureNetwork,
		Port:              cfg.Executor.Port,
		HostPort:          cfg.Executor.HostPort,
		AllowLocalNetwork: cfg.Executor.AllowLocalNetwork,
		DisableIPv6:       cfg.Executor.DisableIPv6,
		DisableTelemetry:  cfg.Executor.DisableTelemetry,
		Target:            cfg.Release(),
		HostPath:          hostPath,
	}
}

// Installer maps the configuration onto an install request that
// logs to log. Validation checks the staged programs are executable by
// executor.user, and install.smoke_command runs as the payload would (see
// smokeFunc). It creates executor.user when it is the dedicated user
// (executorrun.EnsureUser) and fails when it does not exist.
func Installer(ctx context.Context, cfg *config.Config, log *slog.Logger) (installer.Options, error) {
	if err := executorrun.EnsureUser(ctx, cfg.Executor.User, log); err != nil {
		return installer.Options{}, err
	}
	runAs, err := account.Lookup(cfg.Executor.User)
	if err != nil {
		return installer.Options{}, fmt.Errorf("executor.user: %w", err)
	}
	hostPath := release.DefaultHostPath // as the payload runs: never the caller's PATH
	return installer.Options{
		RunAs:                runAs,
		HostPath:             hostPath,
		Smoke:                smokeFunc(cfg, hostPath),
		Image:                cfg.Executor.Image,
		Platform:             cfg.Executor.Platform,
		PlatformDigest:       cfg.Release().ManifestDigest,
		RuntimeDir:           cfg.Executor.RuntimeDir,
		MaxUncompressedBytes: cfg.Install.MaxUncompressedBytes,
		KeepBlobs:            cfg.Install.KeepBlobs,
		LockWait:             cfg.Install.LockWait,
		Timeout:              cfg.Install.Timeout,
		MinRate:              cfg.Install.MinRate,
		Registry:             RegistryOptions(cfg),
		HbxVersion:           buildinfo.Version,
		Logger:               log,
	}, nil
}

// RegistryOptions maps the registry section (and registry.mirrors) onto
// the installer's registry client, for an install and for hbx resolve.
func RegistryOptions(cfg *config.Config) installer.RegistryOptions {
	return installer.RegistryOptions{
		InsecureHosts: cfg.Registry.InsecureHosts,
		AuthFile:      cfg.Registry.AuthFile,
		CertsDir:      cfg.Registry.CertsDir,
		StallTimeout:  cfg.Registry.StallTimeout,
		Retries:       cfg.Registry.Retries,
		Mirrors:       cfg.RegistryMirrors(),
	}
}

// smokeFunc runs install.smoke_command in a staged release as `hbx run
// executor` would run the payload, within install.validate_timeout, with
// a scratch data and state directory and a free port (launch.SmokeScratch);
// nil when no smoke command is configured.
func smokeFunc(cfg *config.Config, hostPath string) installer.SmokeFunc {
	argv := cfg.Install.SmokeCommand
	if len(argv) == 0 {
		return nil
	}
	return func(ctx context.Context, inst *release.Installed) error {
		o := Launch(cfg, hostPath)
		o.Listen = SmokeListen(cfg) // never exposed, whatever executor.exposure
		return launch.SmokeScratch(ctx, o, inst, argv, cfg.Install.ValidateTimeout)
	}
}

// Health maps the configuration onto the checks' options; deep
// re-hashes the release (check release), log receives the checks' logs.
func Health(cfg *config.Config, deep bool, log *slog.Logger) health.Options {
	return health.Options{
		Listen:  cfg.Executor.Listen,
		Port:    cfg.Executor.Port,
		Network: cfg.Executor.Exposure == config.ExposureNetwork,
		Timeout: cfg.Health.Timeout,
		KeyFile: cfg.Health.TokenFile,
		Tools:   cfg.Health.MCPTools,
		Release: health.ReleaseWant{
			RuntimeDir: cfg.Executor.RuntimeDir,
			Target:     cfg.Release(),
			Deep:       deep,
			Change:     func() error { return pending.Change(cfg) },
		},
		DataDir:         cfg.Executor.DataDir,
		DataDirOwner:    cfg.Executor.User,
		Supervisor:      supervisorclient.Programs{Socket: cfg.Supervisor.Socket},
		Programs:        cfg.EnabledPrograms(),
		ExecutorProgram: config.ExecutorProgram,
		PidFile:         filepath.Join(cfg.Executor.StateDir, launch.PidFile),
		Logger:          log,
	}
}

// CheckHealthNames refuses a name in only (hbx health --only) that is no
// check but is near one, with a "did you mean"; the error wraps
// health.ErrUnknownCheck. A name far from every check is left to
// health.Run, whose error lists them all.
func CheckHealthNames(only []string) error {
	for _, n := range only {
		if !slices.Contains(health.Names(), n) {
			if c := suggest.Closest(n, health.Names()); c != "" {
				return fmt.Errorf("%w: %q (did you mean %q?)", health.ErrUnknownCheck, n, c)
			}
		}
	}
	return nil
}
