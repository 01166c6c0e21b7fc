package box

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/buildinfo"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/pending"
	"github.com/hermesbox/hbx/internal/suggest"
	"github.com/hermesbox/hbx/launch"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/supervisor"
)

// launchOptions maps the configuration onto the payload's run options;
// hostPath is the PATH the payload gets.
func launchOptions(cfg *config.Config, hostPath string) launch.Options {
	return launch.Options{
		RuntimeDir:        cfg.Executor.RuntimeDir,
		DataDir:           cfg.Executor.DataDir,
		StateDir:          cfg.Executor.StateDir,
		User:              cfg.Executor.User,
		EnvFile:           cfg.Executor.EnvFile,
		TokenFile:         cfg.Executor.TokenFile,
		TokenEnv:          cfg.Executor.TokenEnv,
		Listen:            cfg.Executor.Listen,
		Port:              cfg.Executor.Port,
		HostPort:          cfg.Executor.HostPort,
		AllowLocalNetwork: cfg.Executor.AllowLocalNetwork,
		DisableIPv6:       cfg.Executor.DisableIPv6,
		DisableTelemetry:  cfg.Executor.DisableTelemetry,
		Target:            cfg.Release(),
		HostPath:          hostPath,
	}
}

// InstallerOptions maps the configuration onto an install request that
// logs to log. Validation checks the staged programs are executable by
// executor.user, and install.smoke_command runs as the payload would (see
// smokeFunc). It creates executor.user when it is the dedicated user
// (ensureExecutorUser) and fails when it does not exist.
func InstallerOptions(ctx context.Context, cfg *config.Config, log *slog.Logger) (installer.Options, error) {
	if err := ensureExecutorUser(ctx, cfg, log); err != nil {
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
		o := launchOptions(cfg, hostPath)
		o.Listen = smokeListen(cfg) // never exposed, whatever executor.exposure
		return launch.SmokeScratch(ctx, o, inst, argv, cfg.Install.ValidateTimeout)
	}
}

// HealthChecks maps the configuration onto the checks' options; deep
// re-hashes the release (check release), log receives the checks' logs.
func HealthChecks(cfg *config.Config, deep bool, log *slog.Logger) health.Options {
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
		Supervisor:      supervisorPrograms{Socket: cfg.Supervisor.Socket},
		Programs:        cfg.EnabledPrograms(),
		ExecutorProgram: config.ExecutorProgram,
		PidFile:         filepath.Join(cfg.Executor.StateDir, launch.PidFile),
		Logger:          log,
	}
}

// supervisorPrograms is the supervisor's control client on Socket seen
// as a health.Supervisor.
type supervisorPrograms struct{ Socket string }

// Programs dials the supervisor and returns its programs' states. When
// nothing listens on the socket it fails with the start-up error that a
// live `hbx supervise --hold-on-error` holds on (a *supervisor.HeldError),
// else wraps health.ErrNoSupervisor.
func (s supervisorPrograms) Programs(ctx context.Context) ([]health.Program, error) {
	c, err := supervisor.Dial(ctx, s.Socket)
	if errors.Is(err, supervisor.ErrNotRunning) {
		if herr := supervisor.CheckHeld(s.Socket); herr != nil {
			return nil, herr
		}
		return nil, fmt.Errorf("%w (nothing listens on %s)", health.ErrNoSupervisor, s.Socket)
	}
	if err != nil {
		return nil, err
	}
	sts, err := c.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("supervisor status: %w", err)
	}
	out := make([]health.Program, len(sts))
	for i, st := range sts {
		out[i] = health.Program{Name: st.Name, State: st.State, PID: st.PID, Detail: st.Detail, Unhealthy: st.Unhealthy}
	}
	return out, nil
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

// ensureExecutorUser creates executor.user when it is account.Dedicated
// (the default when hbx runs as root) and the user database lacks it
// (account.EnsureSystemUser), logging that it did. Another missing user
// is left to the lookups that name it. Errors start with "executor.user: ".
func ensureExecutorUser(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	if cfg.Executor.User != account.Dedicated {
		return nil
	}
	created, err := account.EnsureSystemUser(ctx, account.Dedicated)
	if err != nil {
		return fmt.Errorf("executor.user: %w", err)
	}
	if created {
		log.Info("created the unprivileged system user Executor runs as", "user", account.Dedicated)
	}
	return nil
}
