package installer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	digest "github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/fsat"
	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/release"
)

// activate publishes the staged release directory as releases/<hex> and
// points current at it, previous at what current named before.
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
	final := filepath.Join(relDir, hex)
	err := unix.Renameat2(unix.AT_FDCWD, staged, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) {
		// A damaged or half-published release of the same digest is there
		// (maybe current itself): swap, so current never dangles, then the
		// old tree sits at the staging path and is removed with staging.
		log.Info("replacing existing release directory", "release", hex)
		err = unix.Renameat2(unix.AT_FDCWD, staged, unix.AT_FDCWD, final, unix.RENAME_EXCHANGE)
	}
	if err != nil {
		return fmt.Errorf("publish release %s: %w", hex, err)
	}
	if err := atomicfile.SyncDir(relDir); err != nil {
		return err
	}
	prog.Event(Event{Kind: EventRenamed, Digest: manifest})
	if stageOnly {
		return nil
	}
	prog.Event(Event{Kind: EventSwap, Digest: manifest})
	return switchCurrent(runtimeDir, hex)
}

// switchCurrent points current at releases/<hex> and previous at what
// current named before (unless that is the same release). previous moves
// first; current moves in one rename.
func switchCurrent(runtimeDir, hex string) error {
	target := filepath.Join(release.ReleasesDir, hex)
	current := filepath.Join(runtimeDir, release.CurrentLink)
	old, err := os.Readlink(current)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read current: %w", err)
	case old != target:
		if err := atomicfile.Symlink(old, filepath.Join(runtimeDir, release.PreviousLink)); err != nil {
			return fmt.Errorf("record previous release: %w", err)
		}
	}
	killpoint.At(killpoint.BeforeSwitch)
	if err := atomicfile.Symlink(target, current); err != nil {
		return fmt.Errorf("switch current: %w", err)
	}
	killpoint.At(killpoint.AfterSwitch)
	return nil
}

// ErrNotStaged: Activate was asked for a release that is not published
// under releases/, or is damaged.
var ErrNotStaged = errors.New("release is not staged")

// Activate makes the published release releases/<manifest hex> the active
// one: previous is pointed at the release current named, then current at
// the new one, each by renaming a fresh symlink. Activating the release
// previous names swaps the two (a rollback). It takes the runtime
// directory's lock (waiting up to wait), unless ctx says this process
// holds it (lock.WithHeld). Crash windows: before the first rename
// nothing changed; between the two, previous and current name the same
// release or the old pair with previous replaced, and current is always a
// complete release.
func Activate(ctx context.Context, runtimeDir string, manifest digest.Digest, wait time.Duration) (err error) {
	if err := manifest.Validate(); err != nil {
		return fmt.Errorf("activate: manifest digest: %w", err)
	}
	lk, err := release.LockRuntime(ctx, runtimeDir, "hbx activate", wait, nil)
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
	if err := switchCurrent(runtimeDir, hex); err != nil {
		return fmt.Errorf("activate %s: %w", manifest, err)
	}
	return nil
}

// cleanup removes what earlier runs left: staging trees, temporary files,
// releases that are neither current nor previous, and the blobs
// pruneBlobs removes (all of them unless keepBlobs). Errors are logged,
// not returned: cleanup never fails an install.
func cleanup(runtimeDir string, keepBlobs bool, log *slog.Logger) {
	cleanupTrees(runtimeDir, log)
	pruneBlobs(runtimeDir, keepBlobs, log)
}

// cleanupTrees is cleanup without the blob cache's complete blobs: their
// temporaries go, the blobs stay for the next run.
func cleanupTrees(runtimeDir string, log *slog.Logger) {
	keep := linkedReleases(runtimeDir)
	rm := func(p string) {
		if err := os.RemoveAll(p); err != nil {
			log.Warn("cleanup", "path", p, "err", err)
		}
	}
	rm(filepath.Join(runtimeDir, release.StagingDir))
	rm(filepath.Join(runtimeDir, release.ScratchDir))
	if ents, err := os.ReadDir(filepath.Join(runtimeDir, release.ReleasesDir)); err == nil {
		for _, e := range ents {
			if !keep[e.Name()] {
				log.Info("removing old release", "release", e.Name())
				rm(filepath.Join(runtimeDir, release.ReleasesDir, e.Name()))
			}
		}
	}
	if ents, err := os.ReadDir(runtimeDir); err == nil {
		for _, e := range ents {
			if atomicfile.IsTemp(e.Name()) {
				rm(filepath.Join(runtimeDir, e.Name()))
			}
		}
	}
	filepath.WalkDir(filepath.Join(runtimeDir, release.BlobsDir), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && atomicfile.IsTemp(d.Name()) {
			rm(p)
		}
		return nil
	})
}

// pruneBlobs applies the blob cache's rule: without keepBlobs the whole
// cache is removed; with it, every blob that no release under releases/
// lists (its layers) is removed, so the cache holds only blobs of
// releases that exist. It returns how many blobs it removed.
func pruneBlobs(runtimeDir string, keepBlobs bool, log *slog.Logger) int {
	blobs := filepath.Join(runtimeDir, release.BlobsDir)
	if !keepBlobs {
		n, size := completeBlobs(blobs)
		if err := os.RemoveAll(blobs); err != nil {
			log.Warn("cleanup", "path", blobs, "err", err)
			return 0
		}
		if n > 0 {
			log.Info("removed the blob cache", "blobs", n, "bytes", size)
		}
		return n
	}
	removed := 0
	for _, p := range unlistedBlobs(runtimeDir) {
		if err := os.Remove(p); err != nil {
			log.Warn("cleanup", "path", p, "err", err)
			continue
		}
		removed++
	}
	if removed > 0 {
		log.Info("removed blobs of no release", "blobs", removed)
	}
	return removed
}

// unlistedBlobs returns the paths of the cache's blobs (temporaries
// included) that no release under releases/ lists.
func unlistedBlobs(runtimeDir string) []string {
	listed := map[string]bool{}
	rels, _ := os.ReadDir(filepath.Join(runtimeDir, release.ReleasesDir))
	for _, r := range rels {
		inst, err := release.Open(filepath.Join(runtimeDir, release.ReleasesDir, r.Name()))
		if err != nil {
			continue
		}
		for _, l := range inst.Meta.Layers {
			listed[filepath.Join(runtimeDir, release.BlobsDir, string(l.Algorithm()), l.Encoded())] = true
		}
	}
	var out []string
	filepath.WalkDir(filepath.Join(runtimeDir, release.BlobsDir), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !listed[p] {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// hasLeftovers reports, with a few directory reads, whether cleanup has
// work: staging or scratch trees, temporaries, releases that are neither
// current nor previous, or blobs the cache's rule removes.
func hasLeftovers(runtimeDir string, keepBlobs bool) bool {
	ents, err := os.ReadDir(runtimeDir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		switch n := e.Name(); {
		case n == release.StagingDir, n == release.ScratchDir, atomicfile.IsTemp(n), n == release.BlobsDir && !keepBlobs:
			return true
		}
	}
	keep := linkedReleases(runtimeDir)
	rels, _ := os.ReadDir(filepath.Join(runtimeDir, release.ReleasesDir))
	for _, r := range rels {
		if !keep[r.Name()] {
			return true
		}
	}
	return keepBlobs && len(unlistedBlobs(runtimeDir)) > 0
}

// linkedReleases names the release directories current and previous point
// to: the ones cleanup keeps.
func linkedReleases(runtimeDir string) map[string]bool {
	keep := map[string]bool{}
	for _, l := range []string{release.CurrentLink, release.PreviousLink} {
		if t, err := os.Readlink(filepath.Join(runtimeDir, l)); err == nil {
			keep[filepath.Base(t)] = true
		}
	}
	return keep
}
