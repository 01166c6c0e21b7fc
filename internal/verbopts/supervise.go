package verbopts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/internal/certsdir"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/executorrun"
	"github.com/hermesbox/hbx/internal/supervisorclient"
	"github.com/hermesbox/hbx/launch"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/supervisor"
)

// Supervise is what Supervisor maps onto the supervisor's options.
type Supervise struct {
	// Config is the configuration read at start.
	Config *config.Config
	// Reload, when not nil, reads the configuration again: the executor's
	// image pin (and the MCP tool set pinned with it) comes from it at
	// each start, Config's when it fails.
	Reload func() (*config.Config, error)
	// Log receives the supervisor's and the executor's preparation logs.
	Log *slog.Logger
	// Install is the install on start (executor.install_on_start); the
	// supervisor runs it before the executor when set.
	Install func(ctx context.Context, progress func(string)) error
}

// Supervisor maps the configuration onto the supervisor's options:
// the enabled programs in config order, each with a clean environment
// (supervisor.Options.Env is nil: nothing of hbx's own environment), the executor built from the
// active release at each start and gated by its health probe, the
// install on start when executor.install_on_start is set.
func Supervisor(s Supervise) supervisor.Options {
	cfg := s.Config
	// No Env: a program's environment is its own, never hbx's.
	opts := supervisor.Options{Socket: cfg.Supervisor.Socket, Logger: s.Log, ErrorClasses: supervisorclient.ErrorClasses}
	for _, name := range cfg.ProgramNames() {
		pc := cfg.Programs[name]
		if !pc.Enabled {
			continue
		}
		opts.Programs = append(opts.Programs, s.program(name, pc))
	}
	if cfg.Executor.InstallOnStart {
		if slices.ContainsFunc(opts.Programs, func(p supervisor.Program) bool { return p.Name == config.ExecutorProgram }) {
			opts.InstallProgram = config.ExecutorProgram
		}
		// A bad registry.certs_dir (changed since the configuration
		// loaded) is not retried like a network error.
		opts.Install = func(ctx context.Context, progress func(string)) error {
			err := s.Install(ctx, progress)
			if errors.Is(err, certsdir.ErrInvalid) {
				return supervisor.NoRetry(err)
			}
			return err
		}
	}
	return opts
}

// program maps one programs.<name> entry.
func (s Supervise) program(name string, pc config.Program) supervisor.Program {
	logs := LogPaths(s.Config, name, pc)
	logFile := func(path string) supervisor.LogFile {
		return supervisor.LogFile{Path: path, MaxBytes: pc.LogfileMaxBytes, Backups: pc.LogfileBackups}
	}
	p := supervisor.Program{
		Name:             name,
		Priority:         pc.Priority,
		Autostart:        pc.Autostart,
		Autorestart:      supervisor.Autorestart(pc.Autorestart),
		ExitCodes:        pc.ExitCodes,
		RestartExitCodes: pc.RestartExitCodes,
		FatalExitCodes:   pc.FatalExitCodes,
		StartSecs:        time.Duration(pc.StartSecs) * time.Second,
		StartRetries:     pc.StartRetries,
		StopSignal:       pc.StopSignalNum(),
		StopWait:         time.Duration(pc.StopWaitSecs) * time.Second,
		DependsOn:        pc.DependsOn,
		Stdout:           logFile(logs.Stdout),
		Stderr:           logFile(logs.Stderr),
	}
	if name != config.ExecutorProgram {
		p.Command, p.User, p.Directory = pc.Command, pc.User, pc.Directory
		for _, k := range slices.Sorted(maps.Keys(pc.Environment)) {
			p.Environment = append(p.Environment, k+"="+pc.Environment[k])
		}
		p.OwnLog = logs.Own
		if !pc.Ready.IsZero() {
			p.Probe, p.HealthWait = readiness(pc).Probe(), time.Duration(pc.Ready.Wait)*time.Second
		}
		return p
	}
	return s.executor(p)
}

// ProgramLogs are the paths of a program's log files.
type ProgramLogs struct {
	// Stdout and Stderr are the files the supervisor writes the program's
	// output to: programs.<name>.stdout_logfile and stderr_logfile, by
	// default <supervisor.log_dir>/<name>.out.log and <name>.err.log.
	Stdout, Stderr string
	// Own is the log the program writes itself (programs.<name>.log_file,
	// expanded from its environment); "" when it has none, always for the
	// built-in executor.
	Own string
}

// LogPaths returns the log files of cfg's program name, whose entry is pc.
func LogPaths(cfg *config.Config, name string, pc config.Program) ProgramLogs {
	l := ProgramLogs{Stdout: pc.StdoutLogfile, Stderr: pc.StderrLogfile}
	if l.Stdout == "" {
		l.Stdout = filepath.Join(cfg.Supervisor.LogDir, name+".out.log")
	}
	if l.Stderr == "" {
		l.Stderr = filepath.Join(cfg.Supervisor.LogDir, name+".err.log")
	}
	if name != config.ExecutorProgram {
		l.Own, _ = pc.ExpandReadyPath(pc.LogFile)
	}
	return l
}

// readiness maps programs.<name>.ready_* (validated by Load), its paths
// expanded from the program's environment.
func readiness(pc config.Program) supervisor.Readiness {
	r := pc.Ready
	lock, _ := pc.ExpandReadyPath(r.Lock)
	file, _ := pc.ExpandReadyPath(r.File)
	return supervisor.Readiness{
		LockFile: lock, JSONFile: file, JSONField: r.Field, JSONValue: r.Value,
		MaxAge: time.Duration(r.MaxAge) * time.Second, TCP: r.TCP, HTTP: r.HTTP,
	}
}

// executor completes p as the built-in executor: the active release,
// prepared afresh at each start (with the pin Reload gives), gated and
// watched by its health check; a restart is refused, nothing stopped,
// while executorrun.Check fails for that pin.
func (s Supervise) executor(p supervisor.Program) supervisor.Program {
	cfg, log := s.Config, s.Log
	hostPath := release.DefaultHostPath // never the caller's PATH
	// The MCP tool set is pinned with the image (hbx upgrade --mcp-tools):
	// the probe checks the one read with the pin at the last start.
	var tools atomic.Pointer[[]string]
	// launchOptions are the launch options with the pin Reload gives,
	// and the MCP tools pinned with it (nil: Reload failed or is unset).
	launchOptions := func() (launch.Options, *[]string) {
		lo := Launch(cfg, hostPath)
		if s.Reload == nil {
			return lo, nil
		}
		fresh, err := s.Reload()
		if err != nil {
			log.Warn("re-read the configuration for the executor's pin; keeping the one read at start", "err", err)
			return lo, nil
		}
		lo.Target = Launch(fresh, hostPath).Target
		return lo, &fresh.Health.MCPTools
	}
	// A restart checks the pin it would start with before it stops a
	// running Executor: an edited pin not installed yet is refused,
	// nothing stopped.
	p.Check = func(context.Context) error {
		lo, _ := launchOptions()
		return executorrun.Check(lo)
	}
	p.Build = func(ctx context.Context) (*supervisor.Command, error) {
		lo, t := launchOptions()
		if t != nil {
			tools.Store(t)
		}
		spec, err := executorrun.Prepare(ctx, lo, log)
		if err != nil {
			return nil, err
		}
		executorrun.LogTightened(log, spec)
		return &supervisor.Command{Path: spec.Path, Args: spec.Args, Dir: spec.Dir, Env: spec.Env, Credential: spec.Credential}, nil
	}
	p.Probe = executorProbeTools(cfg, func() []string {
		if t := tools.Load(); t != nil {
			return *t
		}
		return cfg.Health.MCPTools
	})
	p.HealthWait = cfg.Supervisor.HealthWait
	p.HealthInterval = cfg.Supervisor.HealthInterval
	p.WedgeFailures = cfg.Supervisor.WedgeFailures
	return p
}

// executorProbe is the executor's readiness and wedge probe, the code of
// checks of `hbx health`: the readiness check health.readiness names
// (api-health by default: GET /api/health on its listen address answers
// 200 with status "ok", with the bearer key of health.token_file when
// set), then check listeners: every TCP listener of the process tree of
// the pid the supervisor gives (the executor's) is on loopback, the
// listen address and port among them. So an Executor that listens on
// 0.0.0.0 never becomes RUNNING, and is restarted when it starts to while
// running.
func executorProbe(cfg *config.Config) supervisor.ProcessProbe {
	return executorProbeTools(cfg, nil)
}

// executorProbeTools is executorProbe whose readiness check mcp-tools
// expects the names tools returns at each call (cfg's when tools is nil).
func executorProbeTools(cfg *config.Config, tools func() []string) supervisor.ProcessProbe {
	probe, err := health.ReadyProcess(Health(cfg, false, nil), cfg.Health.Readiness, tools)
	if err != nil { // validated by Load
		return supervisor.ProcessProbeFunc(func(context.Context, int) error { return fmt.Errorf("%w: %w", health.ErrUnhealthy, err) })
	}
	return supervisor.ProcessProbeFunc(probe)
}

// ReadinessProbe is the check health.readiness names, with the options of
// `hbx health` (the key file is read at each call); its error wraps
// health.ErrUnhealthy.
func ReadinessProbe(cfg *config.Config) func(context.Context) error {
	ready, err := health.Ready(Health(cfg, false, nil), cfg.Health.Readiness)
	if err != nil { // validated by Load
		return func(context.Context) error { return fmt.Errorf("%w: %w", health.ErrUnhealthy, err) }
	}
	return ready
}
