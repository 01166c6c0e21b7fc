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

// pruneLogged is pruneAfter for a command that fails after a change it
// staged or undid (an upgrade that rolled itself back, a release its
// rehearsal refused): no result to print the note in, so it is logged.
func pruneLogged(ctx context.Context, g *globals, cfg *config.Config, command string) {
	g.box(cfg, nil).PruneReleasesLogged(ctx, command, cfg.Backup.LockWait)
}
