package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/ui"
	"github.com/hermesbox/hbx/upgrade"
)

// newRollbackCommand builds `hbx rollback`.
func newRollbackCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rollback",
		Short: "Undo the last upgrade: the previous release with its pre-upgrade data",
		Long: `Rollback undoes the last completed hbx upgrade (or release change made
by hbx install under existing data, recorded the same way): it pins the previous
release in the config file again and restores the pre-upgrade backup made
for it together with that release (reactivated from previous, no network),
starts the services and waits for their health (see hbx restore). The data
the release rolled back from ran on is kept as <data_dir>.rolled-back-<time>
(older such copies beyond backup.keep_pre_restore go, never this one's).
Then it removes the releases neither current nor previous, with
their blobs (docs/upgrade.md#old-releases).

A change that did not complete (an upgrade that rolled itself back, or
was refused or stopped before activation) is not the last upgrade: the
completed one before it is undone. It refuses, saying why, when no upgrade
was recorded, when the last completed one was already rolled back, when the active release was
installed without a record after it, when previous is not the
release the upgrade replaced, or when the pre-upgrade archive is missing or
records other digests. When the last change was interrupted, undoing it is
the rollback: it says so and exits 0. When the running hbx supervise (or a
restart) already undid it, it refuses saying so and where the data written
meanwhile is kept.`,
		Args: cli.Args(0, 0),
		RunE: g.configured(func(cmd *cobra.Command, _ []string, cfg *config.Config, srcs *config.Sources) error {
			return runRollback(cmd.Context(), changeOpts{g: g, cfg: cfg, srcs: srcs, json: asJSON})
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print steps and the result as JSON lines")
	return cmd
}

// runRollback undoes the last release change as hbx rollback does: the
// change's options as "hbx rollback" (adapters.Box.ChangeOptions), then
// upgrade.Rollback; it prints new → old.
func runRollback(ctx context.Context, o changeOpts) error {
	opts, unlock, err := o.g.box(o.cfg, o.srcs).ChangeOptions(ctx, nil, "hbx rollback", o.step())
	if err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	defer unlock()
	res, err := upgrade.Rollback(ctx, opts)
	if err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	res.Notes = append(res.Notes, pruneAfter(ctx, o.g, o.cfg, "hbx rollback"))
	return printChange(o.g.stdout, "rolled back", res, o.json)
}

// printChange prints an upgrade's or rollback's result (verb: "upgraded",
// "rolled back"): upgrade.Result's Text, or its Fields as a JSON line.
func printChange(w io.Writer, verb string, res *upgrade.Result, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(ui.ChangeFields(res))
	}
	_, err := io.WriteString(w, ui.ChangeText(res, verb))
	return err
}
