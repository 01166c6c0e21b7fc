package adapters

import (
	"context"
	"time"

	"github.com/hermesbox/hbx/internal/prune"
)

// SupervisorCommand names hbx supervise in the runtime directory's lock
// when its recovery or install on start prunes.
const SupervisorCommand = "hbx supervise"

// PruneReleases removes, once command's release change is durable, the
// releases it left unneeded (internal/prune: neither current nor
// previous nor needed by an awaited restore or unfinished change), with
// their blobs and the layer state no remaining release needs. It waits
// up to wait for the runtime directory's lock (0: gives up at once when
// another command holds it). It returns the note (prune.Note: what was
// freed, or why not) for the command to print with its result, and logs
// nothing, so the command says it once; it never fails the caller.
func (b Box) PruneReleases(ctx context.Context, command string, wait time.Duration) string {
	note, _ := b.pruneReleases(ctx, command, wait)
	return note
}

// PruneReleasesLogged is PruneReleases for a caller with no result to
// print the note in (hbx supervise's recoveries and install on start, an
// upgrade that rolled itself back or that its rehearsal refused): it
// logs the note in one line, a warning when pruning failed.
func (b Box) PruneReleasesLogged(ctx context.Context, command string, wait time.Duration) {
	if note, err := b.pruneReleases(ctx, command, wait); err != nil {
		b.Log.Warn(note)
	} else {
		b.Log.Info(note)
	}
}

func (b Box) pruneReleases(ctx context.Context, command string, wait time.Duration) (string, error) {
	cfg := b.Config
	p, err := prune.Releases(ctx, prune.Options{
		RuntimeDir: cfg.Executor.RuntimeDir, DataDir: cfg.Executor.DataDir, KeepBlobs: cfg.Install.KeepBlobs,
		LockWait: wait, Command: command, Log: b.Log,
	})
	return prune.Note(p, err), err
}
