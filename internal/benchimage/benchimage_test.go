package benchimage

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

func layers(t *testing.T, img *Image) []v1.Descriptor {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(img.Dir, "blobs", "sha256", img.Manifest.Encoded()))
	if err != nil {
		t.Fatal(err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m.Layers
}

// TestVersion2SharesBase: version 2 of an image has the same three base
// layers as version 1, byte for byte, and a different, larger top layer;
// version 0 is version 1; a version beyond 2 is refused.
func TestVersion2SharesBase(t *testing.T) {
	dir := t.TempDir()
	build := func(name string, v int) *Image {
		t.Helper()
		img, err := Build(filepath.Join(dir, name), Options{Scale: 0.01, Version: v})
		if err != nil {
			t.Fatalf("Build version %d: %v", v, err)
		}
		return img
	}
	one, zero, two := build("v1", 1), build("v0", 0), build("v2", 2)
	if zero.IndexDigest != one.IndexDigest {
		t.Errorf("version 0 has index %s, version 1 %s: want the same image", zero.IndexDigest, one.IndexDigest)
	}
	l1, l2 := layers(t, one), layers(t, two)
	if len(l1) != 4 || len(l2) != 4 {
		t.Fatalf("versions 1 and 2 have %d and %d layers, want 4 each", len(l1), len(l2))
	}
	for i := range 3 {
		if l1[i].Digest != l2[i].Digest {
			t.Errorf("base layer %d: version 1 %s, version 2 %s; want the same blob", i, l1[i].Digest, l2[i].Digest)
		}
	}
	if l1[3].Digest == l2[3].Digest || l2[3].Size <= l1[3].Size {
		t.Errorf("top layer: version 1 %s (%d B), version 2 %s (%d B); want a different, larger layer", l1[3].Digest, l1[3].Size, l2[3].Digest, l2[3].Size)
	}
	if two.Files != one.Files+256 {
		t.Errorf("version 2 has %d files, version 1 %d: want 256 more (app/dist)", two.Files, one.Files)
	}
	if _, err := Build(filepath.Join(dir, "v3"), Options{Scale: 0.01, Version: 3}); err == nil {
		t.Error("Build version 3 succeeded, want an error")
	}
}

// TestSmallFiles: the entry-count image is the base layer and one layer of
// exactly the files asked for, on top of the base's 602.
func TestSmallFiles(t *testing.T) {
	img, err := Build(t.TempDir(), Options{SmallFiles: 2500})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(layers(t, img)); got != 2 {
		t.Errorf("%d layers, want 2", got)
	}
	if img.Files != 2500+602 {
		t.Errorf("Files = %d, want %d", img.Files, 2500+602)
	}
}
