package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/box"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

// statusOptions are the inputs of runStatus.
type statusOptions struct {
	socket string
	cfg    *config.Config // names disabled programs in errors; may be nil
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
uptime when running, the exit status or the reason otherwise. --json prints
the list as JSON objects with name, state, priority, pid, since, started,
held and detail.

Exit status: 0 when every program shown (all, or the NAMEs given) is
RUNNING; 3 when any is not (STARTING, BACKOFF, STOPPING, STOPPED, EXITED
or FATAL; their names go to stderr), after printing the list; 1 when no
supervisor answers; 2 for an unknown NAME. supervisorctl also exits 3, but
counts STARTING and BACKOFF as running: hbx does not, so a program that
crashes and is retried makes "hbx status" fail. Disabled programs are not
shown; a program with autostart false is STOPPED, so ask about the others
by name.

After the list it says when an upgrade, rollback or restore is half done
(in progress, or interrupted: what to run), and exits 3 then too; and,
after the recovery of an interrupted upgrade rolled it back, where the
data written meanwhile is kept.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, _, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			return runStatus(cmd.Context(), statusOptions{socket: cfg.Supervisor.Socket, cfg: cfg, names: args, json: asJSON, stdout: g.stdout, stderr: g.stderr})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// runStatus prints the status of opts.names (all when empty).
func runStatus(ctx context.Context, opts statusOptions) error {
	c, err := supervisor.Dial(ctx, opts.socket)
	if err != nil {
		return err
	}
	list, err := statusList(ctx, c, opts)
	if err != nil {
		return err
	}
	if opts.json {
		return printStatusJSON(opts, list)
	}
	return printStatus(opts, list)
}

// statusList asks the supervisor behind c for the programs opts.names
// (all when empty or "all"), in the order asked, noting on opts.stderr a
// supervisor that is not a child subreaper.
func statusList(ctx context.Context, c *supervisor.Client, opts statusOptions) ([]supervisor.Status, error) {
	all, err := c.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	// A supervisor that could not become a child subreaper says so
	// (qemu-user); an older one has no /v1/info.
	if in, err := c.Info(ctx); err == nil && in.NotSubreaper != "" && opts.stderr != nil {
		fmt.Fprintf(opts.stderr, "hbx: note: supervisor (pid %d) is %s\n", in.PID, in.NotSubreaper)
	}
	if len(opts.names) == 0 || slices.Contains(opts.names, "all") {
		return all, nil
	}
	known := make([]string, len(all))
	for i, s := range all {
		known[i] = s.Name
	}
	if err := box.CheckProgramNames(opts.cfg, known, opts.names, false); err != nil {
		return nil, err
	}
	var list []supervisor.Status
	for _, n := range opts.names {
		list = append(list, all[slices.Index(known, n)])
	}
	return list, nil
}

// printStatusJSON prints list as JSON; the error says what is not running
// and a release change half done.
func printStatusJSON(opts statusOptions, list []supervisor.Status) error {
	enc := json.NewEncoder(opts.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(list); err != nil {
		return err
	}
	if opts.cfg != nil {
		if change := box.PendingChange(opts.cfg); change != nil {
			return withChange(notRunning(list), change)
		}
	}
	return notRunning(list)
}

// printStatus prints one line per program, then a release change half
// done or a recovery's note; the error says what is not running and the
// change.
func printStatus(opts statusOptions, list []supervisor.Status) error {
	width := 8
	for _, s := range list {
		width = max(width, len(s.Name))
	}
	var b strings.Builder
	for _, s := range list {
		fmt.Fprintf(&b, "%-*s  %-8s  %s\n", width, s.Name, s.State, s.Detail)
	}
	change := error(nil)
	if opts.cfg != nil {
		change = box.PendingChange(opts.cfg)
		if change != nil {
			fmt.Fprintf(&b, "release change: %v\n", change)
		} else if note := upgrade.RecoveryNote(opts.cfg.Executor.RuntimeDir); note != "" {
			fmt.Fprintf(&b, "note: %s\n", note)
		}
	}
	if _, err := io.WriteString(opts.stdout, b.String()); err != nil {
		return err
	}
	return withChange(notRunning(list), change)
}

// withChange is err and change together (one line), either, or nil.
func withChange(err, change error) error {
	switch {
	case change == nil:
		return err
	case err == nil:
		return change
	}
	return fmt.Errorf("%w; %w", err, change)
}

// notRunning returns a *notRunningError naming the programs of list that
// are not RUNNING, or nil.
func notRunning(list []supervisor.Status) error {
	var bad []string
	for _, s := range list {
		if s.State != supervisor.Running {
			bad = append(bad, fmt.Sprintf("%s (%s)", s.Name, s.State))
		}
	}
	if bad == nil {
		return nil
	}
	return &notRunningError{bad}
}

// notRunningError says which programs `hbx status` showed that are not
// RUNNING; exitCode maps it to exitNotRunning.
type notRunningError struct {
	programs []string // "name (STATE)"
}

// Error lists the programs: "not running: hermes (FATAL), worker (BACKOFF)".
func (e *notRunningError) Error() string {
	return "not running: " + strings.Join(e.programs, ", ")
}
