package main

import (
	"context"

	"github.com/hermesbox/hbx/internal/config"
)

// pruneAfter removes, once command's release change is durable, the
// releases it left unneeded, with their blobs (adapters.Box.PruneReleases,
// waiting backup.lock_wait for the runtime directory's lock), and
// returns the note that says what was freed or why not, for the command
// to print with its result (said once: it is not logged). It never fails
// the command.
func pruneAfter(ctx context.Context, g *globals, cfg *config.Config, command string) string {
	return g.box(cfg, nil).PruneReleases(ctx, command, cfg.Backup.LockWait)
}

// pruneAfterFailure is pruneAfter for a command that failed with err:
// after a change that rolled itself back or a release its rehearsal
// refused it prunes, logging the note (no result to print it in);
// adapters.Box.PruneAfterFailure has the rule.
func pruneAfterFailure(ctx context.Context, g *globals, cfg *config.Config, command string, err error) {
	g.box(cfg, nil).PruneAfterFailure(ctx, command, cfg.Backup.LockWait, err)
}
