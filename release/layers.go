package release

import (
	"log/slog"
	"os"
	"path/filepath"

	digest "github.com/opencontainers/go-digest"
)

// LayersDir holds layer states: layers/<chain ID hex>/ is the tree the
// first layers of an image leave (rootfs/, of hard links shared with
// the releases made from it, and files.json), kept so a later install
// whose image starts with the same layers starts from it. See
// docs/install.md, "Extracted layers reused".
const LayersDir = "layers"

// ChainID is the chain ID of the layers whose diff_ids are diffIDs, in
// order (image-spec config.md, "Layer ChainID"): the diff_id of a single
// layer, else sha256 of the chain ID of all but the last, a space and the
// last diff_id. It is "" for no layers.
func ChainID(diffIDs []digest.Digest) digest.Digest {
	var c digest.Digest
	for i, d := range diffIDs {
		if i == 0 {
			c = d
			continue
		}
		c = digest.FromString(string(c) + " " + string(d))
	}
	return c
}

// LayerStateDir is the directory of the layer state of chain ID chain.
func LayerStateDir(runtimeDir string, chain digest.Digest) string {
	return filepath.Join(runtimeDir, LayersDir, chain.Encoded())
}

// PruneLayerStates removes every layer state (LayersDir) that is not the
// state of a proper prefix of the layers of a release under releases/:
// the states a later install of an image sharing layers with a kept
// release could start from stay, the rest (states of removed releases,
// half-removed ones) go. Releases never need a layer state to run or
// verify (they share its inodes, not its names). Each goes as a release
// does (removeAside: renamed out of layers/ before it is deleted, so a
// kill -9 never leaves a half-deleted state there). It returns how many
// it removed; failures are logged. Prune (and so Cleanup) calls it after
// removing releases.
func PruneLayerStates(runtimeDir string, log *slog.Logger) int {
	ents, err := os.ReadDir(filepath.Join(runtimeDir, LayersDir))
	if err != nil {
		return 0
	}
	keep := map[string]bool{}
	rels, _ := os.ReadDir(filepath.Join(runtimeDir, ReleasesDir))
	for _, r := range rels {
		inst, err := Open(filepath.Join(runtimeDir, ReleasesDir, r.Name()))
		if err != nil {
			continue
		}
		for k := 1; k < len(inst.Meta.DiffIDs); k++ {
			if c := ChainID(inst.Meta.DiffIDs[:k]); c.Validate() == nil {
				keep[c.Encoded()] = true
			}
		}
	}
	removed := 0
	for _, e := range ents {
		if keep[e.Name()] {
			continue
		}
		log.Info("removing layer state of no release", "chain", e.Name())
		if _, err := removeAside(runtimeDir, LayersDir, e.Name(), "layer-state"); err != nil {
			log.Warn("remove layer state", "chain", e.Name(), "err", err)
			continue
		}
		removed++
	}
	return removed
}
