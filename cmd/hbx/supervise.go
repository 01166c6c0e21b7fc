package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/box"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
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
		Args: cli.Args(0, 0),
		RunE: g.configured(func(cmd *cobra.Command, _ []string, cfg *config.Config, _ *config.Sources) error {
			// The executor's pin is read again from the configuration at
			// each start: hbx upgrade and rollback move it while this
			// supervisor runs.
			reload := func() (*config.Config, error) {
				c, _, err := g.loadConfig(cmd)
				return c, err
			}
			return runSupervise(cmd.Context(), g, cfg, reload)
		}),
	}
}

// runSupervise runs the supervisor until a stop signal: check the
// programs, take the data lock (executor inherits it), claim the
// supervisor's own locks, recover an interrupted restore or upgrade,
// watch for changes whose command dies, then run.
func runSupervise(ctx context.Context, g *globals, cfg *config.Config, reload func() (*config.Config, error)) error {
	// Before the supervisor runs (the data lock, leftovers of a dead
	// supervisor, recovery of an interrupted restore or upgrade), the
	// signals that would end hbx mean what they mean to a running
	// supervisor: stop ones end this start, the others are logged and
	// ignored.
	ctx, early := supervisor.HandleEarlySignals(ctx, g.log)
	defer early.Stop()
	opts := box.SuperviseOptions(box.Supervise{Config: cfg, Reload: reload, Env: g.env, Log: g.log, Install: g.box(cfg, nil).InstallOnStart})
	opts.StateDir = supervisorStateDir(cfg)
	opts.HandleSignals = true
	// Check the programs before the lock creates anything.
	if _, err := supervisor.New(opts); err != nil {
		return fmt.Errorf("supervise: %w", err)
	}
	release, err := lockExecutorData(ctx, g, cfg, opts.Programs)
	if err != nil {
		return fmt.Errorf("supervise: %w", err)
	}
	defer release()
	s, err := supervisor.New(opts)
	if err != nil {
		return fmt.Errorf("supervise: %w", err)
	}
	// The supervisor's own locks (state directory and socket) before any
	// recovery: a second hbx supervise changes nothing, also when no
	// executor program holds the data lock.
	if err := s.Claim(); err != nil {
		return fmt.Errorf("supervise: %w", err)
	}
	recoverRestore(ctx, g, cfg)
	g.box(cfg, nil).RecoverUpgrade(ctx, false)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("supervise: stopped before any program started: %w", err)
	}
	// While it runs, a release change or restore whose command dies is
	// undone through it, not left serving unconfirmed. A recovery it runs
	// when the process exits is cut short, and its journal lets the next
	// start finish it.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go g.box(cfg, nil).ChangeWatch(reload).Run(wctx)
	early.Quiet() // Run handles every signal from here on
	if err := s.Run(ctx); err != nil {
		return fmt.Errorf("supervise: %w", err)
	}
	return nil
}

// lockExecutorData takes the data directory's lock when programs include
// the executor (the single-writer rule: this supervisor owns the data
// directory for its whole life) and hands it to the executor's processes;
// release gives it back (a no-op without an executor program).
func lockExecutorData(ctx context.Context, g *globals, cfg *config.Config, programs []supervisor.Program) (release func(), err error) {
	i := slices.IndexFunc(programs, func(p supervisor.Program) bool { return p.Name == config.ExecutorProgram })
	if i < 0 {
		return func() {}, nil
	}
	dl, err := lockData(ctx, g, cfg, "hbx supervise", true)
	if err != nil {
		if be := (*datalock.BusyError)(nil); errors.As(err, &be) && !be.Leftovers && be.Owner.Command == "hbx supervise" {
			err = fmt.Errorf("%w: %w", supervisor.ErrAlreadyRunning, err)
		}
		return nil, err
	}
	programs[i].ExtraFiles = []*os.File{dl.File()}
	return func() { _ = dl.Release() }, nil
}
