package prune

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/upgrade"
)

// Options are what Releases works with.
type Options struct {
	RuntimeDir string // absolute; holds the lock
	DataDir    string // absolute; its restore journal names releases to keep
	KeepBlobs  bool   // install.keep_blobs: the blob store's rule (release.PruneBlobs)
	// LockWait is how long to wait for the runtime directory's lock.
	LockWait time.Duration
	// Command names the caller in the lock ("hbx upgrade").
	Command string
	Log     *slog.Logger
}

// Releases takes the runtime directory's lock and removes what
// release.Prune removes, keeping also every release Needed names. It
// returns what it freed; an error when the lock or a journal could not be
// had (nothing removed) or a removal failed (the rest went).
func Releases(ctx context.Context, o Options) (release.Pruned, error) {
	lk, err := release.LockExisting(ctx, o.RuntimeDir, o.Command+" (pruning)", o.LockWait, o.Log)
	if err != nil {
		return release.Pruned{}, fmt.Errorf("prune releases: %w", err)
	}
	defer lk.Unlock()
	need, err := Needed(o.RuntimeDir, o.DataDir)
	if err != nil {
		return release.Pruned{}, fmt.Errorf("prune releases: %w", err)
	}
	return release.Prune(o.RuntimeDir, o.KeepBlobs, Keep(need), o.Log)
}

// Needed names the releases besides current and previous that must
// stay: those an unfinished restore of dataDir needs
// (backup.NeededReleases) and both sides of a release change whose
// journal is not finished (upgrade.Journal.Pending), with the release
// previous named when it began (its rollback points previous back
// there). An unreadable journal is an error: the caller then keeps
// everything.
func Needed(runtimeDir, dataDir string) ([]release.Target, error) {
	need, err := backup.NeededReleases(dataDir)
	if err != nil {
		return nil, err
	}
	j, err := upgrade.ReadJournal(runtimeDir)
	if err != nil {
		return nil, err
	}
	if j != nil && j.Pending() {
		need = append(need, j.Old.Target, j.New.Target)
		if j.Previous != nil && j.Previous.Release != nil {
			need = append(need, j.Previous.Release.Target)
		}
	}
	return need, nil
}

// Keep reports whether a release is one of need: the same manifest
// digest when the target names one, else the same index digest and
// platform (a platform left empty matches any).
func Keep(need []release.Target) func(release.Meta) bool {
	return func(m release.Meta) bool {
		for _, t := range need {
			switch {
			case t.ManifestDigest != "":
				if t.ManifestDigest == m.ManifestDigest {
					return true
				}
			case t.IndexDigest != "" && t.IndexDigest == m.IndexDigest && (t.Platform == "" || t.Platform == m.Platform):
				return true
			}
		}
		return false
	}
}

// Note is the line a command adds to its result for p and err: what was
// freed, or why pruning failed (the command's change stands; the next
// run retries).
func Note(p release.Pruned, err error) string {
	if err != nil {
		if len(p.Releases) > 0 || p.Blobs > 0 {
			return fmt.Sprintf("pruned old releases: %s; not all: %v (the next hbx install retries)", p, err)
		}
		return fmt.Sprintf("old releases not pruned: %v (the change stands; the next hbx install retries)", err)
	}
	return "pruned old releases: " + p.String()
}
