package adapters

import (
	"context"
	"errors"
	"time"

	"github.com/hermesbox/hbx/internal/prune"
	"github.com/hermesbox/hbx/rehearse"
	"github.com/hermesbox/hbx/upgrade"
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

// PruneAfterFailure is PruneReleasesLogged for a command (hbx upgrade,
// hbx install, the supervisor's install on start) that failed with err
// after its change left a release unneeded: one that rolled itself back
// (upgrade.ErrRolledBack: previous pointed back, the failed release
// left) or that its rehearsal refused (rehearse.ErrRefused: the refused
// release staged). Other failures prune nothing here (a release staged
// by a change stopped before activation goes with the next command's
// prune). It reports whether it pruned (or tried to).
func (b Box) PruneAfterFailure(ctx context.Context, command string, wait time.Duration, err error) bool {
	if !errors.Is(err, upgrade.ErrRolledBack) && !errors.Is(err, rehearse.ErrRefused) {
		return false
	}
	b.PruneReleasesLogged(ctx, command, wait)
	return true
}

func (b Box) pruneReleases(ctx context.Context, command string, wait time.Duration) (string, error) {
	cfg := b.Config
	p, err := prune.Releases(ctx, prune.Options{
		RuntimeDir: cfg.Executor.RuntimeDir, DataDir: cfg.Executor.DataDir, KeepBlobs: cfg.Install.KeepBlobs,
		LockWait: wait, Command: command, Log: b.Log,
	})
	return prune.Note(p, err), err
}
