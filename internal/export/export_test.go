package export

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/ociarchive"
	"github.com/hermesbox/hbx/release"
)

// exportBox is Options over a runtime directory that holds an active
// release (release.json only, no rootfs) and its blobs: index, manifest,
// config and two layers. It returns them and the release's record.
func exportBox(t *testing.T) (Options, release.Meta) {
	t.Helper()
	dir := t.TempDir()
	put := func(b []byte) v1.Descriptor {
		d := digest.FromBytes(b)
		p := filepath.Join(dir, release.BlobsDir, "sha256", d.Encoded())
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return v1.Descriptor{MediaType: v1.MediaTypeImageLayerGzip, Digest: d, Size: int64(len(b))}
	}
	jsonOf := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cfg := put([]byte(`{"architecture":"amd64","os":"linux"}`))
	cfg.MediaType = v1.MediaTypeImageConfig
	l1, l2 := put([]byte("layer one")), put([]byte("layer two"))
	man := put(jsonOf(v1.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageManifest, Config: cfg, Layers: []v1.Descriptor{l1, l2}}))
	man.MediaType, man.Platform = v1.MediaTypeImageManifest, &v1.Platform{OS: "linux", Architecture: "amd64"}
	idx := put(jsonOf(v1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageIndex, Manifests: []v1.Descriptor{man}}))
	m := release.Meta{
		Format: release.MetaFormat, Image: "registry.example/executor:v1.5.12@" + idx.Digest.String(),
		IndexDigest: idx.Digest, ManifestDigest: man.Digest, ConfigDigest: cfg.Digest, Platform: "linux/amd64",
		Layers: []digest.Digest{l1.Digest, l2.Digest},
	}
	rel := filepath.Join(dir, release.ReleasesDir, man.Digest.Encoded())
	if err := os.MkdirAll(rel, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rel, release.MetaFile), jsonOf(m), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(release.ReleasesDir, man.Digest.Encoded()), filepath.Join(dir, release.CurrentLink)); err != nil {
		t.Fatal(err)
	}
	return Options{RuntimeDir: dir}, m
}

// TestExport: the archive holds the release's five blobs under its tag;
// while another command holds the runtime directory's lock, a missing
// layer, or a release.json that names other layers than the stored
// manifest, Export fails with nothing at the path, the missing layer
// named with how to get it back.
func TestExport(t *testing.T) {
	b, m := exportBox(t)
	out := filepath.Join(t.TempDir(), "image.tar")
	res, err := Export(context.Background(), b, out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Blobs != 5 || res.Tag != "v1.5.12" || res.Index != m.IndexDigest || res.Manifest != m.ManifestDigest {
		t.Errorf("Export() = %+v, want 5 blobs of %s tagged v1.5.12", res, m.ManifestDigest)
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() != res.Bytes {
		t.Errorf("archive %v (%v), want %d bytes", fi, err, res.Bytes)
	}

	absent := func(what string, err error, want ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("Export(%s) = nil error", what)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Export(%s) = %v, want it to say %q", what, err, w)
			}
		}
		if _, serr := os.Stat(out); !os.IsNotExist(serr) {
			t.Errorf("Export(%s) left %s: %v", what, out, serr)
		}
	}
	os.Remove(out)
	lk, err := release.LockRuntime(context.Background(), b.RuntimeDir, "hbx install", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Export(context.Background(), b, out, nil)
	absent("lock held", err, "hbx install")
	if !lock.IsLocked(err) {
		t.Errorf("Export(lock held) = %v, want a lock error naming the holder", err)
	}
	lk.Unlock()

	layer := filepath.Join(b.RuntimeDir, release.BlobsDir, "sha256", m.Layers[1].Encoded())
	saved, _ := os.ReadFile(layer)
	os.Remove(layer)
	_, err = Export(context.Background(), b, out, nil)
	absent("layer missing", err, "layer 2 "+m.Layers[1].String()+" is missing", "set install.keep_blobs: true and run hbx install --verify",
		"hbx install --verify --from FILE offline")
	if !errors.Is(err, ociarchive.ErrMissing) {
		t.Errorf("Export(layer missing) = %v, want ErrMissing", err)
	}
	// With install.keep_blobs already on, the hint does not ask for it.
	b.KeepBlobs = true
	_, err = Export(context.Background(), b, out, nil)
	absent("layer missing, keep_blobs on", err, "layer 2 "+m.Layers[1].String()+" is missing",
		"run hbx install --verify to fetch them again (or hbx install --verify --from FILE offline)")
	if strings.Contains(err.Error(), "keep_blobs") {
		t.Errorf("Export(layer missing, keep_blobs on) = %v, want no keep_blobs advice", err)
	}
	b.KeepBlobs = false
	os.WriteFile(layer, saved, 0o600)

	// A damaged layer: --verify fetches it again only with
	// install.keep_blobs on, so with it off the hint asks for it first.
	bad := append([]byte(nil), saved...)
	bad[0] ^= 0xff
	os.WriteFile(layer, bad, 0o600)
	_, err = Export(context.Background(), b, out, nil)
	absent("layer damaged", err, m.Layers[1].String(), "set install.keep_blobs: true and run hbx install --verify",
		"hbx install --verify --from FILE offline")
	if !errors.Is(err, ociarchive.ErrDigestMismatch) {
		t.Errorf("Export(layer damaged) = %v, want ErrDigestMismatch", err)
	}
	b.KeepBlobs = true
	_, err = Export(context.Background(), b, out, nil)
	absent("layer damaged, keep_blobs on", err, "run hbx install --verify to fetch it again (or hbx install --verify --from FILE offline)")
	if strings.Contains(err.Error(), "keep_blobs") {
		t.Errorf("Export(layer damaged, keep_blobs on) = %v, want no keep_blobs advice", err)
	}
	b.KeepBlobs = false
	os.WriteFile(layer, saved, 0o600)

	// Every blob missing, of a release naming a layer twice: counted once.
	blobs := filepath.Join(b.RuntimeDir, release.BlobsDir)
	os.Rename(blobs, blobs+".away")
	twice := m
	twice.Layers = append([]digest.Digest{m.Layers[0]}, m.Layers...)
	twiceJSON, _ := json.Marshal(twice)
	cur, _ := release.Current(b.RuntimeDir)
	os.WriteFile(filepath.Join(cur.Dir, release.MetaFile), twiceJSON, 0o644)
	_, err = Export(context.Background(), b, out, nil)
	absent("every blob missing", err, "index "+m.IndexDigest.String()+" is missing", "(and 4 more of its 5)")
	os.Rename(blobs+".away", blobs)

	m.Layers[0], m.Layers[1] = m.Layers[1], m.Layers[0]
	relJSON, _ := json.Marshal(m)
	os.WriteFile(filepath.Join(cur.Dir, release.MetaFile), relJSON, 0o644)
	_, err = Export(context.Background(), b, out, nil)
	absent("layers disagree", err, "names other blobs than release.json records")
}
