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
// another command holds it). It logs one line, the note it returns
// (prune.Note: what was freed, or why not, as a warning); it never fails
// the caller.
func (b Box) PruneReleases(ctx context.Context, command string, wait time.Duration) string {
	cfg := b.Config
	p, err := prune.Releases(ctx, prune.Options{
		RuntimeDir: cfg.Executor.RuntimeDir, DataDir: cfg.Executor.DataDir, KeepBlobs: cfg.Install.KeepBlobs,
		LockWait: wait, Command: command, Log: b.Log,
	})
	note := prune.Note(p, err)
	if err != nil {
		b.Log.Warn(note)
	} else {
		b.Log.Info(note)
	}
	return note
}
