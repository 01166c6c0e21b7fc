package release

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/units"
)

// Pruned is what Prune removed: the release directories (their names
// under releases/) with the bytes of disk their removal freed (blocks
// of inodes no remaining release links, as du counts them), and the
// blobs with their bytes (sizes).
type Pruned struct {
	Releases     []string
	ReleaseBytes int64
	Blobs        int
	BlobBytes    int64
}

// String says what was freed, in one phrase: "removed 3 releases (444.0
// MiB) and 12 blobs (122.0 MiB)", or "nothing to remove".
func (p Pruned) String() string {
	if len(p.Releases) == 0 && p.Blobs == 0 {
		return "nothing to remove"
	}
	return fmt.Sprintf("removed %s (%s) and %s (%s)",
		units.Count(len(p.Releases), "release", "releases"), units.Bytes(p.ReleaseBytes),
		units.Count(p.Blobs, "blob", "blobs"), units.Bytes(p.BlobBytes))
}

// asidePrefix names, in the scratch directory, a release directory
// being removed (removeRelease).
const asidePrefix = "removing-"

// Prune removes what earlier runs left (CleanupLeftovers), every entry
// of releases/ that is neither current nor previous nor a release keep
// reports true for (keep nil: none), the layer state no remaining
// release needs (PruneLayerStates) and the blobs PruneBlobs removes; the
// caller holds the runtime directory's lock. Each release is renamed
// into the scratch directory (and releases/ synced) before it is
// deleted, so a kill -9 leaves it either whole under releases/ or
// half-deleted in the scratch directory, which the next run removes;
// deletion never follows a symlink (a symlink planted under releases/ is
// itself removed, not what it names). It returns what it removed and the
// first error, having gone on past it: a release it could not remove
// stays.
func Prune(runtimeDir string, keepBlobs bool, keep func(Meta) bool, log *slog.Logger) (Pruned, error) {
	var p Pruned
	CleanupLeftovers(runtimeDir, log)
	relDir := filepath.Join(runtimeDir, ReleasesDir)
	fi, err := os.Lstat(relDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return p, nil
	case err != nil:
		return p, fmt.Errorf("prune releases: %w", err)
	case !fi.IsDir():
		return p, fmt.Errorf("prune releases: %s is not a directory (%s)", relDir, fi.Mode().Type())
	}
	ents, err := os.ReadDir(relDir)
	if err != nil {
		return p, fmt.Errorf("prune releases: %w", err)
	}
	linked := linkedReleases(runtimeDir)
	var first error
	for _, e := range ents {
		if linked[e.Name()] || kept(relDir, e, keep) {
			continue
		}
		log.Info("removing old release", "release", e.Name())
		freed, err := removeRelease(runtimeDir, e.Name())
		if err != nil {
			log.Warn("remove old release", "release", e.Name(), "err", err)
			first = cmp.Or(first, err)
			continue
		}
		p.Releases, p.ReleaseBytes = append(p.Releases, e.Name()), p.ReleaseBytes+freed
	}
	PruneLayerStates(runtimeDir, log)
	os.Remove(filepath.Join(runtimeDir, ScratchDir)) // only when empty
	p.Blobs, p.BlobBytes = PruneBlobs(runtimeDir, keepBlobs, log)
	return p, first
}

// kept reports whether the entry e of relDir is a release keep wants.
// An entry that is not a directory (a symlink, a file) or has no
// readable release.json is never kept.
func kept(relDir string, e fs.DirEntry, keep func(Meta) bool) bool {
	if keep == nil || !e.IsDir() {
		return false
	}
	inst, err := Open(filepath.Join(relDir, e.Name()))
	return err == nil && keep(inst.Meta)
}

// removeRelease renames releases/<name> to the scratch directory, syncs
// releases/, then deletes it there, and returns the bytes freed. A
// rename that fails removes nothing.
func removeRelease(runtimeDir, name string) (int64, error) {
	return removeAside(runtimeDir, ReleasesDir, name, "release")
}

// removeAside removes runtimeDir/dir/name as removeRelease does: renamed
// into the scratch directory (as removing-<what>-<name>), dir synced, then
// deleted, so a kill -9 never leaves a half-deleted tree under dir. what
// names the kind in errors. It returns what the deletion freed.
func removeAside(runtimeDir, dir, name, what string) (int64, error) {
	scratch := filepath.Join(runtimeDir, ScratchDir)
	if err := os.Mkdir(scratch, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return 0, fmt.Errorf("create scratch directory: %w", err)
	}
	aside := filepath.Join(scratch, asidePrefix+name)
	if what != "release" {
		aside = filepath.Join(scratch, asidePrefix+what+"-"+name)
	}
	if err := os.RemoveAll(aside); err != nil {
		return 0, fmt.Errorf("remove %s: %w", aside, err)
	}
	if err := os.Rename(filepath.Join(runtimeDir, dir, name), aside); err != nil {
		return 0, fmt.Errorf("move %s %s aside: %w", what, name, err)
	}
	if err := atomicfile.SyncDir(filepath.Join(runtimeDir, dir)); err != nil {
		return 0, err
	}
	freed := freedBytes(aside)
	if err := os.RemoveAll(aside); err != nil {
		return 0, fmt.Errorf("delete %s %s: %w", what, name, err)
	}
	return freed, nil
}

// freedBytes is what deleting the tree at root frees: the blocks of each
// inode whose every link is inside root (an inode another release also
// links stays). Symlinks are counted, never followed.
func freedBytes(root string) int64 {
	seen := map[uint64]uint64{}
	var size int64
	filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		seen[st.Ino]++
		if seen[st.Ino] == uint64(st.Nlink) || d.IsDir() {
			size += st.Blocks * 512
		}
		return nil
	})
	return size
}
