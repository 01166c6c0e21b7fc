package installer

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
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

// maxTrackedDirs bounds the names (entries and the directories holding
// them) the layers applied over a layer source may change before the
// release's files.json is written by a walk of the whole tree rather
// than derived (writeRecords): a map entry of a name each, a few MiB at
// most.
const maxTrackedDirs = 1 << 16

// errStateDamaged: a layer state or release tree that does not match
// its files.json (a name, type, mode or size differs), so it is not
// started from.
var errStateDamaged = errors.New("tree differs from its files.json")

// layerSource is a tree the staged rootfs can start from: the state the
// image's first k layers leave, as a layer state (layers/<chain>) or as
// a release whose layers are exactly those.
type layerSource struct {
	k     int
	dir   string // holds rootfs/ and files.json
	state bool   // a layer state, removed when damaged; false: a release
}

// findLayerSource returns the source holding the most of the image's
// first layers (diffIDs), or nil. Releases count only when their tree
// is hbx's own (release.OwnedByHbx): the ownership fix-up of an older
// release changes its inodes in place. The release being installed
// (self, its hex) never counts: installing it again means its tree is
// damaged or incomplete.
func findLayerSource(runtimeDir string, diffIDs []digest.Digest, self string) *layerSource {
	var best *layerSource
	rels, _ := os.ReadDir(filepath.Join(runtimeDir, release.ReleasesDir))
	for _, r := range rels {
		dir := filepath.Join(runtimeDir, release.ReleasesDir, r.Name())
		if r.Name() == self {
			continue
		}
		inst, err := release.Open(dir)
		if err != nil || inst.Meta.Ownership != release.OwnedByHbx {
			continue
		}
		k := len(inst.Meta.DiffIDs)
		if k == 0 || k > len(diffIDs) || (best != nil && best.k >= k) || !sameDigests(inst.Meta.DiffIDs, diffIDs[:k]) {
			continue
		}
		best = &layerSource{k: k, dir: dir}
	}
	for k := len(diffIDs) - 1; k >= 1 && (best == nil || k > best.k); k-- {
		dir := release.LayerStateDir(runtimeDir, release.ChainID(diffIDs[:k]))
		if _, err := os.Lstat(filepath.Join(dir, release.FilesFile)); err == nil {
			return &layerSource{k: k, dir: dir, state: true}
		}
	}
	return best
}

func sameDigests(a, b []digest.Digest) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// seedStaging starts the staged rootfs from the longest layer source
// found: its tree linked in (files and symlinks hard-linked, directories
// made anew), each file's recorded hash given to the applier; c.from is
// then the first layer left to apply. When linking fails (hard links
// refused, EXDEV, EMLINK, EPERM) or the source differs from its records,
// the staged rootfs is emptied and every layer is applied, said in one
// line (a damaged layer state, or one holding a file at the file
// system's link limit, EMLINK, is removed: keepState then keeps a fresh
// one from this install's own inodes).
func (c *cold) seedStaging() error {
	if c.opts.Verify {
		// A repair: what is on disk may be damaged, and shared inodes
		// share the damage. Every layer is applied; no state is trusted.
		os.RemoveAll(filepath.Join(c.opts.RuntimeDir, release.LayersDir))
		return nil
	}
	if c.opts.ExtractAll {
		return nil
	}
	src := findLayerSource(c.opts.RuntimeDir, c.r.Config.RootFS.DiffIDs, c.r.ManifestDigest.Encoded())
	if src == nil {
		return nil
	}
	start := time.Now()
	err := c.linkFrom(src)
	if err == nil {
		c.from = src.k
		c.log.Info("extracted layers reused", "layers", src.k, "of", len(c.r.Manifest.Layers), "from", src.dir, "took", time.Since(start).Round(time.Millisecond))
		killpoint.At(killpoint.LayersSeeded)
		return nil
	}
	c.log.Warn("extracted layers not reused: applying every layer", "from", src.dir, "err", err)
	if src.state && (errors.Is(err, errStateDamaged) || errors.Is(err, unix.EMLINK)) {
		// Damaged, or holding a file at the link limit: it would fail
		// the same way for every later install. Retired, so this one
		// keeps a fresh state (new inodes) under the same chain.
		os.RemoveAll(src.dir)
	}
	c.a.Close()
	c.a = nil
	if err := os.RemoveAll(c.rootfs); err != nil {
		return fmt.Errorf("empty staging directory: %w", err)
	}
	if err := fsat.MkdirAll(c.rootfs, 0o755); err != nil {
		return fmt.Errorf("create staging directory: %w", err)
	}
	if err := os.Chmod(c.rootfs, 0o755); err != nil {
		return fmt.Errorf("staging directory: %w", err)
	}
	return c.openApplier()
}

// linkFrom links src's tree into the staged rootfs, checking it entry by
// entry against src's files.json (both in walk order: names, types,
// directory modes) and giving each file's recorded sha256 to the
// applier; then it has the applier track the directories the layers
// applied next change, for writeFiles to derive the release's files.json
// from src's.
func (c *cold) linkFrom(src *layerSource) error {
	inst := &release.Installed{Dir: src.dir}
	list, err := inst.OpenFiles()
	if err != nil {
		return fmt.Errorf("%w: %w", errStateDamaged, err)
	}
	defer list.Close()
	check := func(p string, st *unix.Stat_t) error {
		f, ok, err := list.Next()
		if err != nil {
			return fmt.Errorf("%w: %w", errStateDamaged, err)
		}
		if !ok || f.Path != p || !sameEntry(f, st) {
			return fmt.Errorf("%w: %s", errStateDamaged, p)
		}
		if f.Type == "file" {
			var sum [32]byte
			if n, err := hex.Decode(sum[:], []byte(f.SHA256)); err != nil || n != len(sum) {
				return fmt.Errorf("%w: %s: sha256 %q", errStateDamaged, p, f.SHA256)
			}
			c.a.SetFileHash(st.Ino, sum)
		}
		return nil
	}
	if err := linkTree(filepath.Join(src.dir, release.RootfsDir), c.rootfs, check); err != nil {
		return err
	}
	if _, more, err := list.Next(); err != nil || more {
		return fmt.Errorf("%w: %s lists more than its tree holds", errStateDamaged, release.FilesFile)
	}
	c.seed = src
	c.a.TrackChanges(maxTrackedDirs)
	return nil
}

// sameEntry reports whether st is of the type f records, and for a
// directory of its mode (linkTree stats only directories; a file's mode
// and size are --verify's to check).
func sameEntry(f release.File, st *unix.Stat_t) bool {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return f.Type == "file"
	case unix.S_IFDIR:
		return f.Type == "dir" && f.Mode == st.Mode&0o1777
	case unix.S_IFLNK:
		return f.Type == "symlink"
	}
	return false
}

// keepState links the staged rootfs as it stands after the image's first
// k layers into staging/, for listStates to give a files.json and
// publishStates to move to layers/<chain> once the release is durable.
// Only the linking is paid before the last layer; the listing overlaps
// the release's listing, validation and syncfs. A failure costs only the
// state: logged in one line, the install goes on.
func (c *cold) keepState(k int) {
	if c.opts.ExtractAll || c.opts.Verify {
		return
	}
	chain := release.ChainID(c.r.Config.RootFS.DiffIDs[:k])
	if _, err := os.Lstat(release.LayerStateDir(c.opts.RuntimeDir, chain)); err == nil {
		return
	}
	start := time.Now()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	dir := filepath.Join(c.opts.RuntimeDir, release.StagingDir, "layers-"+chain.Encoded()+"-"+hex.EncodeToString(rnd[:]))
	rootfs := filepath.Join(dir, release.RootfsDir)
	err := fsat.MkdirAll(rootfs, 0o755)
	if err == nil {
		err = linkTree(c.rootfs, rootfs, nil)
	}
	if err != nil {
		os.RemoveAll(dir)
		c.log.Warn("layer state not kept: the next image sharing these layers applies them again", "layers", k, "err", err)
		return
	}
	c.states = append(c.states, &stagedState{dir: dir, chain: chain, layers: k})
	c.log.Info("layer state staged", "layers", k, "chain", chain, "took", time.Since(start).Round(time.Millisecond))
}

// listStates writes each staged state's files.json in the background,
// once every layer is applied (no file hash is recorded after that, so
// the applier's hash store is only read, under its lock), to overlap the
// release's own listing (its walk, on the other CPU), validation and
// syncfs. publishStates waits for it; so does the install's end, before
// the applier is closed.
func (c *cold) listStates() {
	for _, s := range c.states {
		c.listing.Add(1)
		go func() {
			defer c.listing.Done()
			start := time.Now()
			rootfs := filepath.Join(s.dir, release.RootfsDir)
			s.err = atomicfile.Write(filepath.Join(s.dir, release.FilesFile), 0o644, func(w io.Writer) error {
				return writeFileList(w, rootfs, c.a.FileHash)
			})
			s.took = time.Since(start)
		}()
	}
}

// stagedState is a layer state linked under staging/, not yet published.
type stagedState struct {
	dir    string
	chain  digest.Digest
	layers int           // how many of the image's first layers it holds
	err    error         // from writing its files.json (listStates)
	took   time.Duration // writing its files.json
}

// publishStates renames the staged layer states into layers/ (durable:
// called after the release's syncfs, which covered their files too).
func (c *cold) publishStates() {
	c.listing.Wait()
	if len(c.states) == 0 {
		return
	}
	layers := filepath.Join(c.opts.RuntimeDir, release.LayersDir)
	if err := fsat.MkdirAll(layers, 0o755); err != nil {
		c.log.Warn("layer state not kept", "err", err)
		return
	}
	for _, s := range c.states {
		if s.err != nil {
			c.log.Warn("layer state not kept: the next image sharing these layers applies them again", "layers", s.layers, "err", s.err)
			os.RemoveAll(s.dir)
			continue
		}
		c.log.Info("layer state listed", "layers", s.layers, "took", s.took.Round(time.Millisecond))
		killpoint.At(killpoint.LayerStatePublish)
		err := unix.Renameat2(unix.AT_FDCWD, s.dir, unix.AT_FDCWD, release.LayerStateDir(c.opts.RuntimeDir, s.chain), unix.RENAME_NOREPLACE)
		if err != nil {
			c.log.Warn("layer state not kept", "chain", s.chain, "err", err)
			os.RemoveAll(s.dir)
		}
	}
	if err := atomicfile.SyncDir(layers); err != nil {
		c.log.Warn("sync layer states", "err", err)
	}
}
