package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/box"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

// superviseLong is the help text of `hbx supervise`.
const superviseLong = `Supervise runs the built-in program "executor" (what "hbx run executor"
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
signal that would end a process is logged and ignored.

--hold-on-error (a container's PID 1): when the supervisor cannot start (a
bad configuration, the data lock held elsewhere, ...) hbx prints its
one-line error and stays up doing nothing but reaping children, so a
restart policy such as "unless-stopped" does not loop; "hbx health"
fails with that error (check supervisor, from <supervisor.socket>.held;
a bad configuration fails every hbx command with the same error). TERM,
INT or QUIT then end it with the error's exit status (2 for a bad
configuration, else 1): the programs never ran.`

// newSuperviseCommand builds `hbx supervise`.
func newSuperviseCommand(g *globals) *cobra.Command {
	var hold bool
	cmd := &cobra.Command{
		Use:   "supervise",
		Short: "Run Executor and the configured programs under hbx's supervisor",
		Long:  superviseLong,
		Args:  wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			held, startup, err := runSuperviseCommand(cmd, g)
			if err == nil || !hold || !startup || cmd.Context().Err() != nil || errors.Is(err, context.Canceled) {
				return err
			}
			fmt.Fprintf(g.stderr, "hbx: %v\n", g.explain(err))
			return supervisor.HoldOnError(cmd.Context(), g.log, held, err)
		},
	}
	cmd.Flags().BoolVar(&hold, "hold-on-error", false, "when the supervisor cannot start, print the error and stay up until TERM, INT or QUIT (a container's PID 1; hbx health fails with the error)")
	return cmd
}

// runSuperviseCommand loads the configuration and runs the supervisor. It
// returns the error; startup is true when it is a start-up error (the
// configuration did not load, or the supervisor's Run did not start), and
// held is then the file for it (supervisor.HeldPath of the socket; "" when
// the configuration did not load).
func runSuperviseCommand(cmd *cobra.Command, g *globals) (held string, startup bool, err error) {
	cfg, _, err := g.loadConfig(cmd)
	if err != nil {
		return "", true, err
	}
	held = supervisor.HeldPath(cfg.Supervisor.Socket)
	// A held file left by a hold that was killed is stale.
	if err := os.Remove(held); err != nil && !errors.Is(err, os.ErrNotExist) {
		g.log.Warn("remove a stale held start-up error", "path", held, "err", err)
	}
	// The executor's pin is read again from the configuration at
	// each start: hbx upgrade and rollback move it while this
	// supervisor runs.
	reload := func() (*config.Config, error) {
		c, _, err := g.loadConfig(cmd)
		return c, err
	}
	ran, err := runSupervise(cmd.Context(), g, cfg, reload)
	return held, !ran, err
}

// runSupervise runs the supervisor until a stop signal: check the
// programs, take the data lock (executor inherits it), claim the
// supervisor's own locks, recover an interrupted restore or upgrade,
// watch for changes whose command dies, then run. ran is true once the
// supervisor's Run started (its error is then no start-up error).
func runSupervise(ctx context.Context, g *globals, cfg *config.Config, reload func() (*config.Config, error)) (ran bool, err error) {
	// Before the supervisor runs (the data lock, leftovers of a dead
	// supervisor, recovery of an interrupted restore or upgrade), the
	// signals that would end hbx mean what they mean to a running
	// supervisor: stop ones end this start, the others are logged and
	// ignored.
	ctx, early := supervisor.HandleEarlySignals(ctx, g.log)
	defer early.Stop()
	opts := superviseOptionsReload(g, cfg, reload)
	opts.StateDir = supervisorStateDir(cfg)
	opts.HandleSignals = true
	// Check the programs before the lock creates anything.
	if _, err := supervisor.New(opts); err != nil {
		return false, fmt.Errorf("supervise: %w", err)
	}
	release, err := lockExecutorData(ctx, g, cfg, opts.Programs)
	if err != nil {
		return false, fmt.Errorf("supervise: %w", err)
	}
	defer release()
	s, err := supervisor.New(opts)
	if err != nil {
		return false, fmt.Errorf("supervise: %w", err)
	}
	// The supervisor's own locks (state directory and socket) before any
	// recovery: a second hbx supervise changes nothing, also when no
	// executor program holds the data lock.
	if err := s.Claim(); err != nil {
		return false, fmt.Errorf("supervise: %w", err)
	}
	recoverRestore(ctx, g, cfg)
	g.box(cfg, nil).RecoverUpgrade(ctx, false)
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("supervise: stopped before any program started: %w", err)
	}
	// While it runs, a release change or restore whose command dies is
	// undone through it, not left serving unconfirmed. A recovery it runs
	// when the process exits is cut short, and its journal lets the next
	// start finish it.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go upgrade.ChangeWatch{Interval: box.ChangeWatchInterval, Logger: g.log, Box: func() upgrade.WatchedBox {
		if c, err := reload(); err == nil {
			return g.box(c, nil).Watched()
		}
		return g.box(cfg, nil).Watched()
	}}.Run(wctx)
	early.Quiet() // Run handles every signal from here on
	if err := s.Run(ctx); err != nil {
		return true, fmt.Errorf("supervise: %w", err)
	}
	return true, nil
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

// superviseOptionsReload is box.SuperviseOptions for cfg, the executor's
// image pin read from reload() at each start (cfg's when reload is nil or
// fails), with the install on start of `hbx install` (box.GuardedInstall).
func superviseOptionsReload(g *globals, cfg *config.Config, reload func() (*config.Config, error)) supervisor.Options {
	return box.SuperviseOptions(box.Supervise{Config: cfg, Reload: reload, Env: g.env, Log: g.log,
		Install: func(ctx context.Context, progress func(string)) error {
			io, err := installerOptions(g, cfg)
			if err != nil {
				return err
			}
			io.Progress = installer.LayerStatus(progress)
			// Under existing data a release change goes through the
			// upgrade path (pre-change backup, journal), or is refused.
			_, err = g.box(cfg, nil).GuardedInstall(ctx, io, true, nil)
			return err
		}})
}

// readinessProbe is box.ReadinessProbe.
func readinessProbe(cfg *config.Config) func(context.Context) error { return box.ReadinessProbe(cfg) }
