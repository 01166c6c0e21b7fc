package release

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	digest "github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/killpoint"
)

// Publish renames the staged release directory staged (complete and
// durable) to releases/<hex> and syncs releases/. A release directory of
// the same digest already there (damaged or half-published, maybe current
// itself) is swapped with it, so current never dangles; the old tree then
// sits at staged and goes with the staging area. Crash windows: before the
// rename nothing visible changed; after it releases/<hex> is complete and
// durable but current is unchanged.
func Publish(runtimeDir, staged, hex string, log *slog.Logger) error {
	relDir := filepath.Join(runtimeDir, ReleasesDir)
	final := filepath.Join(relDir, hex)
	err := unix.Renameat2(unix.AT_FDCWD, staged, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) {
		log.Info("replacing existing release directory", "release", hex)
		err = unix.Renameat2(unix.AT_FDCWD, staged, unix.AT_FDCWD, final, unix.RENAME_EXCHANGE)
	}
	if err != nil {
		return fmt.Errorf("publish release %s: %w", hex, err)
	}
	return atomicfile.SyncDir(relDir)
}

// SwitchCurrent points current at releases/<hex> and previous at what
// current named before (unless that is the same release). previous moves
// first; current moves in one rename.
func SwitchCurrent(runtimeDir, hex string) error {
	target := filepath.Join(ReleasesDir, hex)
	current := filepath.Join(runtimeDir, CurrentLink)
	old, err := os.Readlink(current)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read current: %w", err)
	case old != target:
		if err := atomicfile.Symlink(old, filepath.Join(runtimeDir, PreviousLink)); err != nil {
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

// SetPrevious points previous at releases/<hex> by renaming a fresh
// symlink over it, as SwitchCurrent moves current, or removes previous
// when hex is "" or releases/<hex> is not a release any more (missing or
// damaged: Open fails; found is then false). current is not touched.
// Crash window: previous names the old release or the new one, or is
// there or not; the caller, holding the lock, does it again.
func SetPrevious(runtimeDir, hex string) (found bool, err error) {
	prev := filepath.Join(runtimeDir, PreviousLink)
	found = true
	if hex != "" {
		if _, oerr := Open(filepath.Join(runtimeDir, ReleasesDir, hex)); oerr == nil {
			if err := atomicfile.Symlink(filepath.Join(ReleasesDir, hex), prev); err != nil {
				return true, fmt.Errorf("point previous at %s: %w", hex, err)
			}
			return true, nil
		}
		found = false
	}
	if err := os.Remove(prev); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return found, fmt.Errorf("remove previous: %w", err)
	}
	if err := atomicfile.SyncDir(runtimeDir); err != nil {
		return found, fmt.Errorf("remove previous: %w", err)
	}
	return found, nil
}

// Cleanup removes what earlier runs left (CleanupLeftovers), releases
// that are neither current nor previous, and the blobs PruneBlobs removes
// (all of them unless keepBlobs): Prune keeping no other release. An
// install calls it only once its release is active, so a failed install
// never costs a published release (one an older archive's restore may
// want back). Errors are logged, not returned: Cleanup never fails an
// install.
func Cleanup(runtimeDir string, keepBlobs bool, log *slog.Logger) {
	if _, err := Prune(runtimeDir, keepBlobs, nil, log); err != nil {
		log.Warn("cleanup", "err", err)
	}
}

// CleanupLeftovers removes what a killed run left: the staging tree, the
// scratch directory and temporary files (the blob cache's included); the
// complete blobs and every published release stay.
func CleanupLeftovers(runtimeDir string, log *slog.Logger) {
	removeLogged(filepath.Join(runtimeDir, StagingDir), log)
	removeLogged(filepath.Join(runtimeDir, ScratchDir), log)
	if ents, err := os.ReadDir(runtimeDir); err == nil {
		for _, e := range ents {
			if atomicfile.IsTemp(e.Name()) {
				removeLogged(filepath.Join(runtimeDir, e.Name()), log)
			}
		}
	}
	filepath.WalkDir(filepath.Join(runtimeDir, BlobsDir), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && atomicfile.IsTemp(d.Name()) {
			removeLogged(p, log)
		}
		return nil
	})
}

// removeLogged removes p and everything under it, logging a failure.
func removeLogged(p string, log *slog.Logger) {
	if err := os.RemoveAll(p); err != nil {
		log.Warn("cleanup", "path", p, "err", err)
	}
}

// PruneBlobs applies the blob store's rule: without keepBlobs the whole
// store is removed; with it, every blob that no release under releases/
// lists (its index, manifest, config and layers) is removed, so the store
// holds only blobs of releases that exist. It returns how many complete
// blobs it removed and their bytes (sizes, as CompleteBlobs counts them;
// temporaries go too, uncounted); a blob it could not remove is logged
// and not counted, and a store it could not remove whole counts nothing.
func PruneBlobs(runtimeDir string, keepBlobs bool, log *slog.Logger) (n int, size int64) {
	blobs := filepath.Join(runtimeDir, BlobsDir)
	if !keepBlobs {
		n, size := CompleteBlobs(blobs)
		if err := os.RemoveAll(blobs); err != nil {
			log.Warn("cleanup", "path", blobs, "err", err)
			return 0, 0
		}
		if n > 0 {
			log.Info("removed the blob cache", "blobs", n, "bytes", size)
		}
		return n, size
	}
	for _, p := range unlistedBlobs(runtimeDir) {
		fi, err := os.Lstat(p)
		if err == nil {
			err = os.Remove(p)
		}
		if err != nil {
			log.Warn("cleanup", "path", p, "err", err)
			continue
		}
		if fi.Mode().IsRegular() && !atomicfile.IsTemp(fi.Name()) {
			n, size = n+1, size+fi.Size()
		}
	}
	if n > 0 {
		log.Info("removed blobs of no release", "blobs", n, "bytes", size)
	}
	return n, size
}

// unlistedBlobs returns the paths of the cache's blobs (temporaries
// included) that no release under releases/ lists.
func unlistedBlobs(runtimeDir string) []string {
	listed := map[string]bool{}
	rels, _ := os.ReadDir(filepath.Join(runtimeDir, ReleasesDir))
	for _, r := range rels {
		inst, err := Open(filepath.Join(runtimeDir, ReleasesDir, r.Name()))
		if err != nil {
			continue
		}
		m := inst.Meta
		for _, d := range append([]digest.Digest{m.IndexDigest, m.ManifestDigest, m.ConfigDigest}, m.Layers...) {
			if d.Validate() == nil {
				listed[filepath.Join(runtimeDir, BlobsDir, string(d.Algorithm()), d.Encoded())] = true
			}
		}
	}
	var out []string
	filepath.WalkDir(filepath.Join(runtimeDir, BlobsDir), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !listed[p] {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// HasLeftovers reports, with a few directory reads, whether Cleanup has
// work: staging or scratch trees, temporaries, releases that are neither
// current nor previous, or blobs the cache's rule removes.
func HasLeftovers(runtimeDir string, keepBlobs bool) bool {
	ents, err := os.ReadDir(runtimeDir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		switch n := e.Name(); {
		case n == StagingDir, n == ScratchDir, atomicfile.IsTemp(n), n == BlobsDir && !keepBlobs:
			return true
		}
	}
	keep := linkedReleases(runtimeDir)
	rels, _ := os.ReadDir(filepath.Join(runtimeDir, ReleasesDir))
	for _, r := range rels {
		if !keep[r.Name()] {
			return true
		}
	}
	return keepBlobs && len(unlistedBlobs(runtimeDir)) > 0
}

// linkedReleases names the release directories current and previous point
// to: the ones Cleanup keeps.
func linkedReleases(runtimeDir string) map[string]bool {
	keep := map[string]bool{}
	for _, l := range []string{CurrentLink, PreviousLink} {
		if t, err := os.Readlink(filepath.Join(runtimeDir, l)); err == nil {
			keep[filepath.Base(t)] = true
		}
	}
	return keep
}

// CompleteBlobs counts the complete blobs in the cache and their bytes.
func CompleteBlobs(dir string) (n int, size int64) {
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || atomicfile.IsTemp(e.Name()) {
			return nil
		}
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n++
			size += fi.Size()
		}
		return nil
	})
	return n, size
}
