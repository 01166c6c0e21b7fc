package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/box"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
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

// runSupervise runs the supervisor until a stop signal (box.Supervise),
// with this command's data lock and restore recovery.
func runSupervise(ctx context.Context, g *globals, cfg *config.Config, reload func() (*config.Config, error)) error {
	b := g.box(cfg, nil)
	return b.Supervise(ctx, box.SuperviseRun{
		Reload: reload, Env: g.env, StateDir: box.SupervisorStateDir(cfg),
		LockData: func(ctx context.Context) (*datalock.Lock, error) {
			return box.LockData(ctx, cfg, g.log, "hbx supervise", true)
		},
		RecoverRestore: b.RecoverInterruptedRestore,
	})
}
