package installer

import (
	"errors"
	"fmt"

	"github.com/hermesbox/hbx/internal/units"

	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
)

// ErrNoSpace: the runtime directory's filesystem is too small for the
// install, found before pulling or on ENOSPC during it.
var ErrNoSpace = errors.New("not enough free space")

// Free-space estimate: the uncompressed size of a layer is not in the
// manifest, so it is taken as expansionRatio times the compressed size
// (typical for gzip'd node_modules trees), plus a fixed margin.
const (
	expansionRatio = 3
	spaceMargin    = 256 << 20
)

// checkSpace refuses early, with the numbers, when the runtime directory's
// filesystem cannot hold the blobs still to fetch plus the unpacked layers.
func checkSpace(runtimeDir string, cache blobCache, layers []v1.Descriptor) error {
	var toFetch, compressed int64
	for _, l := range layers {
		compressed += l.Size
		if !cache.has(l.Digest, l.Size) {
			toFetch += l.Size
		}
	}
	need := toFetch + expansionRatio*compressed + spaceMargin
	var st unix.Statfs_t
	if err := unix.Statfs(runtimeDir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", runtimeDir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free < need {
		return fmt.Errorf("%w in %s: %s free, need about %s (%s of blobs to fetch + %dx %s compressed layers unpacked + %s margin)",
			ErrNoSpace, runtimeDir, units.Bytes(free), units.Bytes(need), units.Bytes(toFetch), expansionRatio, units.Bytes(compressed), units.Bytes(spaceMargin))
	}
	return nil
}

// noSpace turns ENOSPC into ErrNoSpace saying the staging tree is removed
// (the caller's deferred cleanup removes it).
func noSpace(err error, staged string) error {
	if errors.Is(err, unix.ENOSPC) {
		return fmt.Errorf("%w: %w (staging %s removed; current release untouched)", ErrNoSpace, err, staged)
	}
	return err
}
