package main

import (
	"context"

	"github.com/hermesbox/hbx/internal/config"
)

// pruneAfter removes, once command's release change is durable, the
// releases it left unneeded, with their blobs (adapters.Box.PruneReleases,
// waiting backup.lock_wait for the runtime directory's lock), and
// returns the note that says what was freed or why not; it is logged
// too. It never fails the command.
func pruneAfter(ctx context.Context, g *globals, cfg *config.Config, command string) string {
	return g.box(cfg, nil).PruneReleases(ctx, command, cfg.Backup.LockWait)
}
