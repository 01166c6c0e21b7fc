package adapters

// The backup side's adapters (`hbx backup`, `hbx restore`, the restore
// recovery of `hbx supervise`, `hbx upgrade` and `hbx rollback`, the data
// lock of `hbx run executor` and `hbx supervise`): each fills one
// interface of package backup with the supervisor's socket, the installer,
// the config file or internal/datalock, and decides nothing.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hermesbox/hbx/internal/verbopts"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/internal/pinfile"
	"github.com/hermesbox/hbx/internal/supervisorwatch"
	"github.com/hermesbox/hbx/supervisor"
)

// New is cfg's box (srcs: where its values came from, nil when not
// known; configPath: the config file pins are written to) with the box's
// own hooks: the supervisor on cfg's socket, the data lock, the restore's
// runtime, pin and recovery. terminal opens the controlling terminal for
// a passphrase prompt (backup.PassphraseSource).
func New(cfg *config.Config, srcs *config.Sources, configPath string, log *slog.Logger, terminal func() (backup.Terminal, func(), error)) Box {
	b := Box{Config: cfg, Sources: srcs, ConfigPath: configPath, Log: log, Hooks: Hooks{Terminal: terminal, Owner: lookupOwner}}
	b.Dial = func(ctx context.Context, c *config.Config) (Supervised, error) {
		svc, err := dialServices(ctx, c, log)
		if svc == nil {
			return nil, err
		}
		return svc, err
	}
	b.LockUnsupervised = func(ctx context.Context, c *config.Config, command string) (func(), error) {
		return lockUnsupervised(ctx, c, log, nil, command)
	}
	b.RestoreRuntime = func(c *config.Config) backup.Runtime { return installRuntime{cfg: c, log: log} }
	b.RestorePin = func(c *config.Config) backup.Config { return pinfile.File{Path: configPath, Config: c} }
	b.RecoverRestore = func(ctx context.Context, c *config.Config, srcs *config.Sources, svc Supervised) error {
		s, _ := svc.(*SupervisorServices)
		return b.with(c).recoverRestoreFor(ctx, srcs, s)
	}
	return b
}

// Passphrase is the archives' passphrase source (backup.PassphraseSource):
// backup.passphrase_file, else a prompt on b.Terminal (twice with
// confirm).
func (b Box) Passphrase(confirm bool) backup.PassphraseFunc {
	return backup.PassphraseSource(b.Config.Backup.PassphraseFile, confirm, b.Terminal)
}

// lookupOwner resolves executor.user to a numeric owner; errors wrap
// config.ErrInvalid.
func lookupOwner(name string) (backup.Owner, error) {
	uid, gid, err := account.IDs(name)
	if err != nil {
		return backup.Owner{}, fmt.Errorf("%w: executor.user: %w", config.ErrInvalid, err)
	}
	return backup.Owner{UID: uid, GID: gid}, nil
}

// dialServices returns the supervisor on cfg's socket as backup.Services,
// or nil (and no error) when none runs.
func dialServices(ctx context.Context, cfg *config.Config, log *slog.Logger) (*SupervisorServices, error) {
	c, err := supervisor.Dial(ctx, cfg.Supervisor.Socket)
	if errors.Is(err, supervisor.ErrNotRunning) {
		log.Info("no supervisor runs", "socket", cfg.Supervisor.Socket)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	auto := cfg.AutostartPrograms()
	sts, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	watched := ""
	if len(sts) > 0 {
		watched = sts[0].Name
	}
	sock := supervisorSocket{c: c, watch: watchSupervisor(c, watched)}
	s := &SupervisorServices{probe: supervisor.ProbeFunc(verbopts.ReadinessProbe(cfg))}
	s.Supervised = backup.NewSupervised(sock, s, auto, sock.watch)
	s.NotRunning, s.ShuttingDown = supervisor.ErrNotRunning, supervisor.ErrShuttingDown
	return s, nil
}

// SupervisorServices is backup.Services over the supervisor's control
// socket (backup.Supervised); probe is its readiness check.
type SupervisorServices struct {
	*backup.Supervised
	probe supervisor.Probe
}

// Check runs the readiness probe (backup.Probe).
func (s *SupervisorServices) Check(ctx context.Context) error { return s.probe.Check(ctx) }

// SetProbe makes p the readiness probe of the waits (Supervised).
func (s *SupervisorServices) SetProbe(p supervisor.Probe) supervisor.Probe {
	old := s.probe
	s.probe = p
	return old
}

// supervisorSocket is backup.Supervisor over a supervisor.Client.
type supervisorSocket struct {
	c     *supervisor.Client
	watch *supervisorwatch.Watch
}

func (s supervisorSocket) Status(ctx context.Context) ([]backup.ProgramState, error) {
	sts, err := s.c.Status(ctx)
	out := make([]backup.ProgramState, len(sts))
	for i, st := range sts {
		out[i] = backup.ProgramState{Name: st.Name, State: st.State, Detail: st.Detail}
	}
	return out, err
}

func (s supervisorSocket) HoldAll(ctx context.Context) (backup.ProgramHold, error) {
	h, err := s.c.Hold(ctx, "all")
	if err != nil {
		return backup.ProgramHold{}, err
	}
	released := new(atomic.Bool)
	s.watch.WatchHold(h.Done(), released)
	ph := backup.ProgramHold{Release: func() error { released.Store(true); return h.Release() }}
	for _, r := range h.Results {
		ph.Results = append(ph.Results, backup.ProgramState{Name: r.Name, State: r.State, Detail: r.Error})
	}
	return ph, nil
}

func (s supervisorSocket) WaitRunning(ctx context.Context, names ...string) error {
	_, err := s.c.WaitRunning(ctx, names...)
	return err
}

func (s supervisorSocket) Start(ctx context.Context, names ...string) (bool, error) {
	res, err := s.c.Start(ctx, names...)
	held := slices.ContainsFunc(res, func(r supervisor.Result) bool { return strings.Contains(r.Error, "stopped by a hold") })
	return held, err
}

// installRuntime is backup.Runtime over the installer, configured like
// `hbx install` but for the archive's image when it names one, read from
// from (an OCI layout or archive; "": the registry). Its error wraps
// backup.ErrRuntimeUnavailable only when the registry could not give the
// image (runtimeUnavailable), never with from set.
type installRuntime struct {
	cfg  *config.Config
	log  *slog.Logger
	from string
}

func (r installRuntime) Install(ctx context.Context, image, platform string, manifest digest.Digest) (bool, error) {
	opts, err := verbopts.Installer(ctx, r.cfg, r.log)
	if err != nil {
		return false, err
	}
	if image != "" && image != opts.Image {
		opts.Image, opts.PlatformDigest = image, ""
	}
	if image != "" {
		opts.Wanted = "the archive's image"
	}
	if manifest != "" && platform == opts.Platform {
		opts.PlatformDigest = manifest
	}
	opts.From = r.from
	res, err := installer.Install(ctx, opts)
	if err != nil && r.from != "" {
		// The operator named the image's file: whatever kept it from
		// installing (missing, not an image, another image, too slow for
		// the install's deadline), the runtime was not "unavailable".
		return false, err
	}
	if err != nil {
		return false, wrapUnavailable(err)
	}
	return res.Changed, nil
}

// LockData takes the data directory's lock (internal/datalock) for
// command. With stopLeftovers, processes that a dead owner left holding it
// (a supervisor or hbx run executor killed with SIGKILL) get the executor
// program's stopsignal, then SIGKILL after its stopwaitsecs, and each is
// logged; without, they are named in the error.
func LockData(ctx context.Context, cfg *config.Config, log *slog.Logger, command string, stopLeftovers bool) (*datalock.Lock, error) {
	pc := cfg.Programs[config.ExecutorProgram]
	l, err := datalock.Acquire(ctx, cfg.Executor.DataDir, datalock.Options{
		Command:       command,
		StopLeftovers: stopLeftovers,
		StopSignal:    pc.StopSignalNum(),
		StopWait:      time.Duration(pc.StopWaitSecs) * time.Second,
	})
	if err != nil {
		return nil, err
	}
	for _, p := range l.Stopped {
		log.Warn("stopped a process left running on the data directory by an owner that is gone",
			"pid", p.PID, "command", p.Command, "lock", l.Path(), "sigkill_after_stopwaitsecs", l.Killed)
	}
	return l, nil
}

// lockUnsupervised takes the data lock for command when no supervisor
// answers (svc is nil), so that nothing starts the payload while command
// changes or reads the data, and refuses when something runs it (hbx run
// executor, a supervisor on another socket). With a supervisor, its hold
// keeps the programs stopped and it keeps the lock. release is never nil.
func lockUnsupervised(ctx context.Context, cfg *config.Config, log *slog.Logger, svc *SupervisorServices, command string) (release func(), err error) {
	if svc != nil {
		return func() {}, nil
	}
	l, err := LockData(ctx, cfg, log, command, false)
	if err != nil {
		return func() {}, err
	}
	return func() {
		if err := l.Release(); err != nil {
			log.Warn("release the data lock", "err", err)
		}
	}, nil
}

// HoldData makes the data safe to read or replace for command: the
// running supervisor (its holds keep the programs stopped), else the data
// lock (lockUnsupervised). release closes the one or the other and is
// never nil.
func (b Box) HoldData(ctx context.Context, command string) (svc *SupervisorServices, release func(), err error) {
	svc, err = dialServices(ctx, b.Config, b.Log)
	if err != nil {
		return nil, func() {}, err
	}
	unlock, err := lockUnsupervised(ctx, b.Config, b.Log, svc, command)
	if svc == nil {
		return nil, unlock, err
	}
	return svc, func() { svc.Close(); unlock() }, err
}

// RecoverInterruptedRestore finishes or undoes an interrupted restore
// before `hbx supervise` starts the programs. With a supervisor already
// answering (this one is about to refuse to start), it does nothing. Data
// restored without its runtime is never undone: with
// executor.install_on_start that runtime is installed here, and while it
// is not the active release the error (a *backup.AwaitedError naming the
// image) refuses the start; it is the only error returned. A recovery
// that did something prunes the releases as the interrupted restore
// would have (PruneReleasesLogged, without waiting for the lock; its failure
// is only logged).
func (b Box) RecoverInterruptedRestore(ctx context.Context) error {
	if _, err := supervisor.Dial(ctx, b.Config.Supervisor.Socket); err == nil {
		return nil
	}
	opts := b.recoverOptions(nil, nil)
	opts.InstallAwaited = b.Config.Executor.InstallOnStart
	msg, err := backup.Recover(ctx, opts)
	aerr := backup.AwaitedRuntime(b.Config.Executor.DataDir, b.Config.Executor.RuntimeDir)
	awaiting := errors.Is(aerr, backup.ErrRuntimeAwaited)
	switch {
	case err != nil && awaiting:
		// The awaited runtime could not be installed (or the journal
		// names another than the pin): nothing starts, say so.
		b.Log.Error("the restore done without its runtime could not be finished; not starting the programs", "err", err)
	case err != nil:
		b.Log.Error("an interrupted restore could not be recovered; starting the programs anyway", "err", err)
	case msg != "":
		b.Log.Warn("interrupted restore recovered", "what", msg)
		b.PruneReleasesLogged(ctx, SupervisorCommand, 0)
	}
	if awaiting {
		return aerr
	}
	return nil
}

// recoverOptions are backup.Recover's options for b (srcs: nil when not
// known; svc: the running supervisor, nil when none runs).
func (b Box) recoverOptions(srcs *config.Sources, svc *SupervisorServices) backup.RecoverOptions {
	cfg := b.Config
	opts := verbopts.Recover(cfg)
	opts.Runtime, opts.Logger = installRuntime{cfg: cfg, log: b.Log}, b.Log
	opts.Config = pinfile.File{Path: b.ConfigPath, Config: cfg, Sources: srcs}
	if svc != nil {
		opts.Services = svc
	}
	return opts
}

// recoverRestoreFor undoes or finishes an interrupted restore before an
// upgrade or rollback (svc: the running supervisor, nil when none runs).
// What it did is logged.
func (b Box) recoverRestoreFor(ctx context.Context, srcs *config.Sources, svc *SupervisorServices) error {
	if _, err := backup.Recover(ctx, b.recoverOptions(srcs, svc)); err != nil {
		return fmt.Errorf("recover an interrupted restore: %w", err)
	}
	// No other release may be installed on data restored without its
	// runtime; that runtime itself installs as a plain install
	// (internal/guardedinstall).
	if err := backup.AwaitedRuntime(b.Config.Executor.DataDir, b.Config.Executor.RuntimeDir); errors.Is(err, backup.ErrRuntimeAwaited) {
		return fmt.Errorf("refuse to change the release: %w", err)
	}
	return nil
}
