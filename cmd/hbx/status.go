package main

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/pending"
	"github.com/hermesbox/hbx/internal/supervisorclient"
	"github.com/hermesbox/hbx/internal/ui"
	"github.com/hermesbox/hbx/supervisor"
)

// statusOptions are the inputs of runStatus.
type statusOptions struct {
	cfg    *config.Config // its supervisor.socket; names disabled programs in errors
	names  []string       // empty: all
	json   bool
	stdout io.Writer
	stderr io.Writer // notes about the supervisor itself; may be nil
}

// newStatusCommand builds `hbx status`.
func newStatusCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [NAME...]",
		Short: "Show the supervised programs' states, like supervisorctl status",
		Long: `Status prints one line per program: name, state (STOPPED, STARTING,
RUNNING, BACKOFF, STOPPING, EXITED, FATAL) and a description: pid and
uptime when running, when it stopped (as supervisorctl: "Dec 02 01:23 PM")
after a stop, the exit status or the reason otherwise. --json prints
the list as JSON objects with name, state, priority, pid, since, started,
held and detail. After the list it says when an upgrade, rollback or
restore is half done, and what to run. Disabled programs are not shown.

Exit status: 0 when every program shown (all, or the NAMEs given) is
RUNNING; 3 when any is not (STARTING and BACKOFF count as not running;
their names go to stderr), when "hbx supervise --hold-on-error" holds on
its start-up error, or when a release change is half done or the data
awaits its runtime; 1 when no supervisor answers otherwise; 2 for an
unknown NAME or a bad configuration. Details:
docs/configuration.md#exit-codes.`,
		RunE: g.configured(func(cmd *cobra.Command, args []string, cfg *config.Config, _ *config.Sources) error {
			return runStatus(cmd.Context(), statusOptions{cfg: cfg, names: args, json: asJSON, stdout: g.stdout, stderr: g.stderr})
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// heldStatusError is hbx status's error while hbx supervise holds on its
// start-up error (a *supervisor.HeldError): no program runs, exit 3.
type heldStatusError struct{ err error }

func (e *heldStatusError) Error() string { return e.err.Error() }

// Unwrap returns the held error.
func (e *heldStatusError) Unwrap() error { return e.err }

// runStatus prints the status of opts.names (all when empty).
func runStatus(ctx context.Context, opts statusOptions) error {
	c, err := supervisorclient.Dial(ctx, opts.cfg)
	if errors.Is(err, supervisor.ErrHolding) {
		return &heldStatusError{err}
	}
	if err != nil {
		return pending.NoSupervisorStatus(opts.cfg, err)
	}
	rep, err := pending.Status(ctx, c, opts.cfg, opts.names, opts.stderr)
	if err != nil {
		return err
	}
	if opts.json {
		if err := ui.StatusJSON(opts.stdout, rep.Programs); err != nil {
			return err
		}
		return rep.Err()
	}
	if _, err := io.WriteString(opts.stdout, ui.StatusText(rep.Programs, rep.Change, rep.Note)); err != nil {
		return err
	}
	return rep.ErrAfterText()
}
