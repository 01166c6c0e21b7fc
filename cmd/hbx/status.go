package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/hermesbox/hbx/supervisor"
	"github.com/spf13/cobra"
)

// statusOptions are the inputs of runStatus.
type statusOptions struct {
	socket string
	names  []string // empty: all
	json   bool
	stdout io.Writer
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
held and detail.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, _, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			return runStatus(cmd.Context(), statusOptions{socket: cfg.Supervisor.Socket, names: args, json: asJSON, stdout: g.stdout})
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
	all, err := c.Status(ctx)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	list := all
	if len(opts.names) > 0 && !slices.Contains(opts.names, "all") {
		list = nil
		for _, n := range opts.names {
			i := slices.IndexFunc(all, func(s supervisor.Status) bool { return s.Name == n })
			if i < 0 {
				return fmt.Errorf("%w: %q", supervisor.ErrUnknownProgram, n)
			}
			list = append(list, all[i])
		}
	}
	if opts.json {
		enc := json.NewEncoder(opts.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	width := 8
	for _, s := range list {
		width = max(width, len(s.Name))
	}
	var b strings.Builder
	for _, s := range list {
		fmt.Fprintf(&b, "%-*s  %-8s  %s\n", width, s.Name, s.State, s.Detail)
	}
	_, err = io.WriteString(opts.stdout, b.String())
	return err
}
