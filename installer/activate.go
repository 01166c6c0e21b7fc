package installer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/fsat"
	"github.com/hermesbox/hbx/release"
)

// activate publishes the staged release directory as releases/<hex>
// (release.Publish) and points current at it, previous at what current
// named before (release.SwitchCurrent), reporting each step.
//
// Crash windows: before the rename nothing visible changed. After it,
// releases/<hex> is complete and durable but current is unchanged. The
// previous link moves before current does; current moves in one rename.
//
// With stageOnly the links are left alone: the release is published,
// complete and durable, for a later Activate.
func activate(runtimeDir, staged, hex string, log *slog.Logger, prog Progress, manifest digest.Digest, stageOnly bool) error {
	relDir := filepath.Join(runtimeDir, release.ReleasesDir)
	if err := fsat.MkdirAll(relDir, 0o755); err != nil {
		return fmt.Errorf("create releases directory: %w", err)
	}
	if err := ownDirs(log, relDir); err != nil {
		return fmt.Errorf("releases directory: %w", err)
	}
	if err := release.Publish(runtimeDir, staged, hex, log); err != nil {
		return err
	}
	prog.Event(Event{Kind: EventRenamed, Digest: manifest})
	if stageOnly {
		return nil
	}
	prog.Event(Event{Kind: EventSwap, Digest: manifest})
	return release.SwitchCurrent(runtimeDir, hex)
}

// ErrNotStaged: Activate was asked for a release that is not published
// under releases/, or is damaged.
var ErrNotStaged = errors.New("release is not staged")

// Activate makes the published release releases/<manifest hex> the active
// one: previous is pointed at the release current named, then current at
// the new one, each by renaming a fresh symlink. Activating the release
// previous names swaps the two (a rollback). It takes the lock of the
// existing runtime directory (waiting up to wait; it never creates the
// directory), unless ctx says this process holds it (lock.WithHeld). Crash windows: before the first rename
// nothing changed; between the two, previous and current name the same
// release or the old pair with previous replaced, and current is always a
// complete release.
func Activate(ctx context.Context, runtimeDir string, manifest digest.Digest, wait time.Duration) (err error) {
	if err := manifest.Validate(); err != nil {
		return fmt.Errorf("activate: manifest digest: %w", err)
	}
	lk, err := release.LockExisting(ctx, runtimeDir, "hbx activate", wait, nil)
	if err != nil {
		return err
	}
	defer func() {
		if uerr := lk.Unlock(); uerr != nil && err == nil {
			err = fmt.Errorf("release lock: %w", uerr)
		}
	}()
	hex := manifest.Encoded()
	inst, err := release.Open(filepath.Join(runtimeDir, release.ReleasesDir, hex))
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotStaged, manifest, err)
	}
	if _, err := inst.Program(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotStaged, manifest, err)
	}
	// A release an earlier hbx installed (a rollback's) is made hbx's
	// alone before it runs again.
	if err := ownRelease(inst, slog.New(slog.DiscardHandler)); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotStaged, manifest, err)
	}
	if err := release.SwitchCurrent(runtimeDir, hex); err != nil {
		return fmt.Errorf("activate %s: %w", manifest, err)
	}
	return nil
}
