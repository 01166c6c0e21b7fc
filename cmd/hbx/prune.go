package main

import (
	"context"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/prune"
)

// pruneAfter removes, once command's release change is durable, the
// releases it left unneeded (internal/prune), with their blobs, and
// returns the note that says what was freed or why not; it is logged
// too. It never fails the command.
func pruneAfter(ctx context.Context, g *globals, cfg *config.Config, command string) string {
	p, err := prune.Releases(ctx, prune.Options{
		RuntimeDir: cfg.Executor.RuntimeDir, DataDir: cfg.Executor.DataDir, KeepBlobs: cfg.Install.KeepBlobs,
		LockWait: cfg.Backup.LockWait, Command: command, Log: g.log,
	})
	note := prune.Note(p, err)
	if err != nil {
		g.log.Warn(note)
	} else {
		g.log.Info(note)
	}
	return note
}
