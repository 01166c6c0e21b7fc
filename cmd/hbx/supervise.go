package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/hermesbox/hbx/internal/datadir"

	"github.com/hermesbox/hbx/internal/verbopts"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/adapters"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/internal/supervise"
	"github.com/hermesbox/hbx/supervisor"
)

// superviseLong is the help text of `hbx supervise`.
const superviseLong = `Supervise runs the built-in program "executor" (what "hbx run executor"
runs, from the active release) and the programs configured under
programs.<name>.* (by default "hermes", the Hermes gateway), with
supervisord's semantics: priority order, depends_on, autorestart, startsecs,
startretries, stopsignal and stopwaitsecs to the whole process group.
Executor is RUNNING only once health.readiness passes (by default GET
/api/health answers "ok") and it listens on loopback only, so its
dependents never start against a dead Executor; the same probe then
detects a wedged one.

It serves a control socket (supervisor.socket, mode 0600) for "hbx status",
"start", "stop", "restart", "logs" and "shutdown", writes each program's
output to rotated log files under supervisor.log_dir, and reaps every zombie
(it may be PID 1). It holds the data directory's lock for its whole life:
a second supervisor, "hbx run executor" or a backup or restore without a
supervisor is refused (exit 1), naming the holder. It finishes or undoes
a restore, upgrade or rollback whose command died.

Signals: TERM, INT and QUIT stop every program in reverse priority order,
then exit 0. HUP and USR1 reopen the log files (for logrotate). Every other
signal that would end a process is logged and ignored.

--hold-on-error (a container's PID 1): a start-up error is printed, then
hbx only reaps children until TERM, INT or QUIT end it with the error's
status (2 or 1), so "unless-stopped" never loops; "hbx health" and
"hbx status" (exit 3) fail with it meanwhile.

How it supervises (process markers, stop order, checks): docs/supervise.md;
the data directory's lock: docs/security.md#one-writer-per-data-directory.`

// newSuperviseCommand builds `hbx supervise`.
func newSuperviseCommand(g *globals) *cobra.Command {
	var hold bool
	cmd := &cobra.Command{
		Use:   "supervise",
		Short: "Run Executor and the configured programs under hbx's supervisor",
		Long:  superviseLong,
		Args:  cli.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !hold {
				_, _, err := runSuperviseCommand(cmd, g)
				return err
			}
			// Caught from the start, so no signal ends the process
			// between a failed start and the hold on its error.
			sigs := supervisor.CatchHoldSignals()
			defer sigs.Release()
			held, startup, err := runSuperviseCommand(cmd, g)
			if err == nil || !startup || cmd.Context().Err() != nil || errors.Is(err, context.Canceled) {
				return err
			}
			fmt.Fprintf(g.stderr, "hbx: %v\n", g.explain(err))
			return sigs.Hold(cmd.Context(), g.log, held, err)
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
	if err := verbopts.CheckProgramUsers(cfg); err != nil {
		return held, true, err
	}
	// A held file left by a hold that was killed is stale; one a live
	// hold keeps is its error, not this start's to remove.
	if err := supervisor.RemoveStaleHeld(held); err != nil {
		g.log.Warn("remove a stale held start-up error", "path", held, "err", err)
	}
	// The executor's pin is read again from the configuration at each
	// start: hbx upgrade and rollback move it while this supervisor runs.
	reload := func() (*config.Config, error) {
		c, _, err := g.loadConfig(cmd)
		return c, err
	}
	ran, err := runSupervise(cmd.Context(), g, cfg, reload)
	return held, !ran, err
}

// runSupervise runs the supervisor until a stop signal (supervise.Supervise),
// with this command's data lock and restore recovery; ran is true once
// the supervisor's Run started.
func runSupervise(ctx context.Context, g *globals, cfg *config.Config, reload func() (*config.Config, error)) (ran bool, err error) {
	b := g.box(cfg, nil)
	return supervise.Supervise(ctx, b, supervise.Run{
		Reload: reload, StateDir: datadir.SupervisorState(cfg.Executor.DataDir),
		LockData: func(ctx context.Context) (*datalock.Lock, error) {
			return adapters.LockData(ctx, cfg, g.log, "hbx supervise", true)
		},
		RecoverRestore: b.RecoverInterruptedRestore,
	})
}
