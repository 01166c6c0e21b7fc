package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/supervisor"
)

// newSuperviseCommand builds `hbx supervise`.
func newSuperviseCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "supervise",
		Short: "Run Executor and the configured programs under hbx's supervisor",
		Long: `Supervise runs the built-in program "executor" (what "hbx run executor"
runs, from the active release) and the programs configured under
programs.<name>.* (by default "hermes", the Hermes gateway), with
supervisord's semantics: priority order, depends_on, autorestart, startsecs,
startretries, stopsignal and stopwaitsecs to the whole process group.
Executor is RUNNING only once the check health.readiness names passes (by
default GET /api/health answers 200 with status "ok", with the bearer key of
health.token_file when set) and it listens on loopback only, so its
dependents never start against a dead Executor; while it runs, the same
probe detects a wedged one.

It serves a control socket (supervisor.socket, mode 0600) for "hbx status",
"start", "stop", "restart", "logs" and "shutdown", writes each program's
output to rotated log files under supervisor.log_dir, and reaps every zombie
(it is a child subreaper, and may be PID 1).

One writer per data directory: it holds the data directory's lock
(<parent>/.<data>.lock) for its whole life and Executor's processes inherit
it. It refuses to start, naming the holder, while another supervisor (any
socket), "hbx run executor", or a backup or restore without a supervisor
holds it. Both locks are checked before it recovers an interrupted restore
or upgrade: a second "hbx supervise" exits 1 and changes nothing. While it
runs, it looks every second for a restore, upgrade or rollback whose
command died (its journal unfinished, no live holder of hbx.lock) and
undoes it through itself, logging what it did and where the data written
meanwhile is kept. Every process of every program inherits a marker
(<parent>/.<data>.supervisor/<program>.marker): before it starts anything,
it stops (stopsignal, stopwaitsecs, SIGKILL) and logs each process that a
supervisor killed before it left running, and a program stop also stops
processes that left the program's process group (setsid).

Signals: TERM, INT and QUIT stop every program in reverse priority order,
then exit 0. HUP and USR1 reopen the log files (for logrotate). Every other
signal that would end a process is logged and ignored.`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			// The executor's probe needs its pid, which only the
			// supervisor knows; it is bound once the supervisor exists,
			// before any probe runs.
			var sup atomic.Pointer[supervisor.Supervisor]
			pid := func() int {
				if s := sup.Load(); s != nil {
					return s.Get(config.ExecutorProgram).PID
				}
				return 0
			}
			// The executor's pin is read again from the configuration at
			// each start: hbx upgrade and rollback move it while this
			// supervisor runs.
			reload := func() (*config.Config, error) {
				c, _, err := g.loadConfig(cmd)
				return c, err
			}
			// Before the supervisor runs (the data lock, leftovers of a
			// dead supervisor, recovery of an interrupted restore or
			// upgrade), the signals that would end hbx mean what they
			// mean to a running supervisor: stop ones end this start,
			// the others are logged and ignored.
			ctx, early := superviseEarlySignals(cmd.Context(), g)
			defer early.stop()
			cmd.SetContext(ctx)
			opts := superviseOptionsReload(g, cfg, pid, reload)
			opts.StateDir = supervisorStateDir(cfg)
			opts.HandleSignals = true
			// Check the programs before the lock creates anything.
			if _, err := supervisor.New(opts); err != nil {
				return fmt.Errorf("supervise: %w", err)
			}
			if i := slices.IndexFunc(opts.Programs, func(p supervisor.Program) bool { return p.Name == config.ExecutorProgram }); i >= 0 {
				// The single-writer rule: this supervisor owns the data
				// directory for its whole life, and every process of
				// Executor inherits the lock.
				dl, err := lockData(cmd.Context(), g, cfg, "hbx supervise", true)
				if err != nil {
					if be := (*datalock.BusyError)(nil); errors.As(err, &be) && !be.Leftovers && be.Owner.Command == "hbx supervise" {
						err = fmt.Errorf("%w: %w", supervisor.ErrAlreadyRunning, err)
					}
					return fmt.Errorf("supervise: %w", err)
				}
				defer dl.Release()
				opts.Programs[i].ExtraFiles = []*os.File{dl.File()}
			}
			s, err := supervisor.New(opts)
			if err != nil {
				return fmt.Errorf("supervise: %w", err)
			}
			sup.Store(s)
			// The supervisor's own locks (state directory and socket)
			// before any recovery: a second hbx supervise changes
			// nothing, also when no executor program holds the data lock.
			if err := s.Claim(); err != nil {
				return fmt.Errorf("supervise: %w", err)
			}
			recoverRestore(cmd.Context(), g, cfg)
			recoverUpgrade(cmd.Context(), g, cfg, false)
			if err := cmd.Context().Err(); err != nil {
				return fmt.Errorf("supervise: stopped before any program started: %w", err)
			}
			// While it runs, a release change or restore whose command
			// dies is undone through it, not left serving unconfirmed.
			// A recovery it runs when the process exits is cut short, and
			// its journal lets the next start finish it.
			wctx, stopWatch := context.WithCancel(cmd.Context())
			defer stopWatch()
			go watchChanges(wctx, g, func() *config.Config {
				if c, err := reload(); err == nil {
					return c
				}
				return cfg
			}, changeWatchInterval)
			early.quiet() // Run handles every signal from here on
			if err := s.Run(cmd.Context()); err != nil {
				return fmt.Errorf("supervise: %w", err)
			}
			return nil
		},
	}
}

// superviseOptions maps the configuration onto the supervisor's options.
// executorPID returns the running executor's pid (0 when none runs), for
// its probe.
func superviseOptions(g *globals, cfg *config.Config, executorPID func() int) supervisor.Options {
	return superviseOptionsReload(g, cfg, executorPID, nil)
}

// superviseOptionsReload is superviseOptions where the executor's image
// pin comes from reload() at each start (cfg's when reload is nil or
// fails).
func superviseOptionsReload(g *globals, cfg *config.Config, executorPID func() int, reload func() (*config.Config, error)) supervisor.Options {
	var env []string
	for _, kv := range g.env {
		if !strings.HasPrefix(kv, config.EnvPrefix) {
			env = append(env, kv)
		}
	}
	opts := supervisor.Options{Env: env, Socket: cfg.Supervisor.Socket, Logger: g.log}
	for _, name := range cfg.ProgramNames() {
		pc := cfg.Programs[name]
		if !pc.Enabled {
			continue
		}
		opts.Programs = append(opts.Programs, supervisedProgram(g, cfg, name, pc, executorPID, reload))
	}
	if cfg.Executor.InstallOnStart {
		if slices.ContainsFunc(opts.Programs, func(p supervisor.Program) bool { return p.Name == config.ExecutorProgram }) {
			opts.InstallProgram = config.ExecutorProgram
		}
		opts.Install = func(ctx context.Context, progress func(string)) error {
			io, err := installerOptions(g, cfg)
			if err != nil {
				return err
			}
			io.Progress = installStatus(progress)
			// Under existing data a release change goes through the
			// upgrade path (pre-change backup, journal), or is refused.
			_, err = guardedInstall(ctx, g, cfg, nil, io, true, nil)
			return err
		}
	}
	return opts
}

// installStatus turns install events into the detail the executor's
// status shows while install_on_start runs: "installing the release
// (N/M layers)", N the layers applied.
func installStatus(set func(string)) installer.Progress {
	var applied atomic.Int64
	return installProgressFunc(func(e installer.Event) {
		switch e.Kind {
		case installer.EventBlobStart, installer.EventLayerStart:
			set(fmt.Sprintf("installing the release (%d/%d layers)", applied.Load(), e.Count))
		case installer.EventLayerDone:
			set(fmt.Sprintf("installing the release (%d/%d layers)", applied.Add(1), e.Count))
		case installer.EventActivate:
			set("installing the release: activating it")
		}
	})
}

// installProgressFunc is an installer.Progress from a function.
type installProgressFunc func(installer.Event)

func (f installProgressFunc) Event(e installer.Event) { f(e) }

// supervisedProgram maps one programs.<name> entry; executorPID is the
// executor's probe's way to its pid.
func supervisedProgram(g *globals, cfg *config.Config, name string, pc config.Program, executorPID func() int, reload func() (*config.Config, error)) supervisor.Program {
	logFile := func(path, suffix string) supervisor.LogFile {
		if path == "" {
			path = filepath.Join(cfg.Supervisor.LogDir, name+suffix)
		}
		return supervisor.LogFile{Path: path, MaxBytes: pc.LogfileMaxBytes, Backups: pc.LogfileBackups}
	}
	p := supervisor.Program{
		Name:         name,
		Priority:     pc.Priority,
		Autostart:    pc.Autostart,
		Autorestart:  supervisor.Autorestart(pc.Autorestart),
		ExitCodes:    pc.ExitCodes,
		StartSecs:    time.Duration(pc.StartSecs) * time.Second,
		StartRetries: pc.StartRetries,
		StopSignal:   unix.SignalNum("SIG" + strings.TrimPrefix(strings.ToUpper(pc.StopSignal), "SIG")),
		StopWait:     time.Duration(pc.StopWaitSecs) * time.Second,
		DependsOn:    pc.DependsOn,
		Stdout:       logFile(pc.StdoutLogfile, ".out.log"),
		Stderr:       logFile(pc.StderrLogfile, ".err.log"),
	}
	if name != config.ExecutorProgram {
		p.Command, p.User, p.Directory = pc.Command, pc.User, pc.Directory
		for _, k := range slices.Sorted(maps.Keys(pc.Environment)) {
			p.Environment = append(p.Environment, k+"="+pc.Environment[k])
		}
		return p
	}
	// The built-in executor: the active release, prepared afresh at each
	// start, gated and watched by its health check.
	hostPath := release.DefaultHostPath // never the caller's PATH
	// The MCP tool set is pinned with the image (hbx upgrade --mcp-tools):
	// the probe checks the one read with the pin at the last start.
	var tools atomic.Pointer[[]string]
	p.Build = func(ctx context.Context) (*supervisor.Command, error) {
		lo := launchOptions(cfg, hostPath)
		if reload != nil {
			if fresh, err := reload(); err != nil {
				g.log.Warn("re-read the configuration for the executor's pin; keeping the one read at start", "err", err)
			} else {
				flo := launchOptions(fresh, hostPath)
				lo.IndexDigest, lo.Platform, lo.ManifestPin = flo.IndexDigest, flo.Platform, flo.ManifestPin
				tools.Store(&fresh.Health.MCPTools)
			}
		}
		spec, err := prepareLaunch(ctx, lo, g.log)
		if err != nil {
			return nil, err
		}
		logTightened(g, spec)
		return &supervisor.Command{Path: spec.Path, Args: spec.Args, Dir: spec.Dir, Env: spec.Env, Credential: spec.Credential}, nil
	}
	p.Probe = executorProbeTools(cfg, executorPID, func() []string {
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
// pid() is on loopback, the listen address and port among them. So an
// Executor that listens on 0.0.0.0 never becomes RUNNING, and is
// restarted when it starts to while running. With executor.exposure
// network the readiness check is followed by mcp-auth (health.Ready) and
// the listeners must be exactly the listen address and port.
func executorProbe(cfg *config.Config, pid func() int) supervisor.Probe {
	return executorProbeTools(cfg, pid, nil)
}

// executorProbeTools is executorProbe whose readiness check mcp-tools
// expects the names tools returns at each call (cfg's when tools is nil).
func executorProbeTools(cfg *config.Config, pid func() int, tools func() []string) supervisor.Probe {
	var want netip.AddrPort
	if a, err := netip.ParseAddr(cfg.Executor.Listen); err == nil { // validated by Load
		want = netip.AddrPortFrom(a, uint16(cfg.Executor.Port))
	}
	ready := readinessProbe(cfg)
	return supervisor.ProbeFunc(func(ctx context.Context) error {
		r := ready
		if tools != nil && cfg.Health.Readiness == health.ReadyMCPTools {
			c := *cfg
			c.Health.MCPTools = tools()
			r = readinessProbe(&c)
		}
		if err := r(ctx); err != nil {
			return err
		}
		p := pid()
		if p == 0 {
			return fmt.Errorf("%w: executor has no pid", health.ErrUnhealthy)
		}
		if cfg.Executor.Exposure == config.ExposureNetwork {
			_, err := health.ListenersExact(p, want)
			return err
		}
		_, err := health.Listeners(p, want)
		return err
	})
}

// readinessProbe is the check health.readiness names, with the options of
// `hbx health` (the key file is read at each call).
func readinessProbe(cfg *config.Config) func(context.Context) error {
	ready, err := health.Ready(healthChecks(cfg, false, nil), cfg.Health.Readiness)
	if err != nil { // validated by Load
		return func(context.Context) error { return fmt.Errorf("%w: %w", health.ErrUnhealthy, err) }
	}
	return ready
}

// earlySignals is the signal handling of hbx supervise before its
// supervisor runs (supervisor.Signals says what each signal means).
type earlySignals struct {
	ch     chan os.Signal
	done   chan struct{}
	silent atomic.Bool
}

// superviseEarlySignals catches every signal in supervisor.Signals until
// stop: a SignalStop one cancels the returned context, the others are
// logged and ignored. After quiet, signals are still caught (so none ends
// hbx between this handler and the supervisor's own) but left to the
// supervisor, which handles them too.
func superviseEarlySignals(parent context.Context, g *globals) (context.Context, *earlySignals) {
	ctx, cancel := context.WithCancel(parent)
	e := &earlySignals{ch: make(chan os.Signal, 8), done: make(chan struct{})}
	sigs := make([]os.Signal, 0, len(supervisor.Signals))
	for sig := range supervisor.Signals {
		sigs = append(sigs, sig)
	}
	signal.Notify(e.ch, sigs...)
	go func() {
		defer cancel()
		for {
			select {
			case <-e.done:
				return
			case v := <-e.ch:
				if e.silent.Load() {
					continue
				}
				sig := v.(syscall.Signal)
				if supervisor.Signals[sig] == supervisor.SignalStop {
					g.log.Info("signal: stopping before any program started", "signal", unix.SignalName(sig))
					cancel()
					continue
				}
				if sig != syscall.SIGPIPE { // also raised by hbx's own writes to a closed connection
					g.log.Info("signal: ignored while the supervisor starts", "signal", unix.SignalName(sig))
				}
			}
		}
	}()
	return ctx, e
}

// quiet leaves every signal to the running supervisor.
func (e *earlySignals) quiet() { e.silent.Store(true) }

// stop ends the early handling.
func (e *earlySignals) stop() {
	signal.Stop(e.ch)
	close(e.done)
}
