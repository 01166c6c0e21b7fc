package releasetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
)

// Write writes releases/<manifest hex> under the runtime directory rd: a
// release named name (image "r/x:<name>", its index and manifest digests
// derived from name, platform linux/amd64) with an empty rootfs, and
// returns its Meta. It fails t on any error.
func Write(t testing.TB, rd, name string) release.Meta {
	t.Helper()
	m := release.Meta{Format: release.MetaFormat, Image: "r/x:" + name, IndexDigest: digest.FromString(name + "-index"),
		ManifestDigest: digest.FromString(name + "-manifest"), Platform: "linux/amd64"}
	dir := filepath.Join(rd, release.ReleasesDir, m.ManifestDigest.Encoded())
	if err := os.MkdirAll(filepath.Join(dir, release.RootfsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, release.MetaFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}
