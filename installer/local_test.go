package installer

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/release"
)

// writeLayout writes p as the OCI image layout dir, as `skopeo copy --all`
// or `hbx export` make it: oci-layout, an index.json with one descriptor
// (p's index, ref.name "test"), and every blob and document of the
// registry under blobs/sha256.
func writeLayout(t *testing.T, dir string, reg *fakeRegistry, p published) {
	t.Helper()
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	put := func(d digest.Digest, b []byte) {
		if err := os.WriteFile(filepath.Join(blobs, d.Encoded()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for d, b := range reg.blobs {
		put(d, b)
	}
	for k, m := range reg.manifests {
		if d := digest.Digest(k); d.Validate() == nil {
			put(d, m.body)
		}
	}
	idx := v1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageIndex, Manifests: []v1.Descriptor{{
		MediaType: v1.MediaTypeImageIndex, Digest: p.index, Size: int64(len(reg.manifests[p.index.String()].body)),
		Annotations: map[string]string{v1.AnnotationRefName: "test"},
	}}}
	ib, _ := json.Marshal(idx)
	writeFiles(t, dir, map[string]string{v1.ImageLayoutFile: `{"imageLayoutVersion":"1.0.0"}`, v1.ImageIndexFile: string(ib)})
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tarDir writes the directory dir as the tar file (an OCI archive).
func tarDir(t *testing.T, dir, file string) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		st, err := e.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(st, "")
		if err != nil {
			return err
		}
		h.Name, _ = filepath.Rel(dir, p)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if st.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// localEnv is an image published in the fake registry (to compare with
// and to prove no request is made) and written as a layout and archive.
type localEnv struct {
	*env
	p       published
	layout  string
	archive string
}

func newLocalEnv(t *testing.T) *localEnv {
	e := &localEnv{env: newEnv(t)}
	e.p = e.reg.publish(t, "executor", goodParts(hostPlat), goodParts(v1.Platform{OS: "linux", Architecture: otherArch()}))
	e.layout = filepath.Join(t.TempDir(), "layout")
	writeLayout(t, e.layout, e.reg, e.p)
	e.archive = filepath.Join(t.TempDir(), "image.tar")
	tarDir(t, e.layout, e.archive)
	return e
}

// TestInstallFromLocalImage: an install from an OCI layout directory and
// from an OCI archive gives the release a registry install gives (same
// release.json digests, same files.json), keeps the same blobs in the
// store, leaves no scratch behind and sends the registry no request.
func TestInstallFromLocalImage(t *testing.T) {
	e := newLocalEnv(t)
	ctx := context.Background()
	want, err := Install(ctx, e.opts(e.p, func(o *Options) { o.KeepBlobs = true }))
	if err != nil {
		t.Fatalf("Install() from the registry = %v", err)
	}
	wantFiles, _ := os.ReadFile(filepath.Join(want.Release.Dir, release.FilesFile))
	wantBlobs := cachedBlobs(t, e.runtime)
	before := e.reg.requestCount()
	for _, from := range []string{e.layout, e.archive} {
		rt := filepath.Join(t.TempDir(), "runtime")
		res, err := Install(ctx, e.opts(e.p, func(o *Options) {
			o.RuntimeDir, o.From, o.KeepBlobs = rt, from, true
			// Ignored: a registry install would fail on each of these.
			o.Registry = RegistryOptions{AuthFile: "/nonexistent/auth.json", CertsDir: "/nonexistent/certs.d"}
		}))
		if err != nil {
			t.Fatalf("Install(From %s) = %v", from, err)
		}
		if !res.Changed || res.Fetched != 2 || res.From != from {
			t.Errorf("Install(From %s) = %+v, want Changed, 2 layers read from it", from, res)
		}
		m, w := res.Release.Meta, want.Release.Meta
		if m.IndexDigest != w.IndexDigest || m.ManifestDigest != w.ManifestDigest || m.ConfigDigest != w.ConfigDigest {
			t.Errorf("Install(From %s) release %+v, want the registry's %+v", from, m, w)
		}
		if got, _ := os.ReadFile(filepath.Join(res.Release.Dir, release.FilesFile)); string(got) != string(wantFiles) {
			t.Errorf("Install(From %s): files.json differs from the registry install's", from)
		}
		if got := cachedBlobs(t, rt); strings.Join(got, ",") != strings.Join(wantBlobs, ",") {
			t.Errorf("Install(From %s) kept blobs %v, want %v", from, got, wantBlobs)
		}
		if _, err := os.Lstat(filepath.Join(rt, release.ScratchDir)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Install(From %s) left %s: %v", from, release.ScratchDir, err)
		}
		// A damaged release is repaired from the local image (--verify).
		os.WriteFile(filepath.Join(rt, "current", "rootfs", "app/src/serve.ts"), []byte("tampered"), 0o644)
		res, err = Install(ctx, e.opts(e.p, func(o *Options) { o.RuntimeDir, o.From, o.Verify, o.Registry = rt, from, true, RegistryOptions{} }))
		if err != nil || !res.Changed {
			t.Errorf("Install(From %s, Verify) of a damaged release = %+v, %v; want it repaired", from, res, err)
		}
		if b, _ := os.ReadFile(filepath.Join(rt, "current", "rootfs", "app/src/serve.ts")); string(b) != "console.log(1)\n" {
			t.Errorf("serve.ts = %q after Install(From %s, Verify), want it restored", b, from)
		}
		// Warm: PATH is not read (even a missing one does not matter).
		res, err = Install(ctx, e.opts(e.p, func(o *Options) { o.RuntimeDir, o.From = rt, "/nonexistent" }))
		if err != nil || res.Changed || res.From != "" {
			t.Errorf("warm Install(From missing) = %+v, %v; want a no-op that read nothing (From \"\")", res, err)
		}
	}
	if n := e.reg.requestCount() - before; n != 0 {
		t.Errorf("installs from a local image made %d registry requests, want 0", n)
	}
}

// TestInstallFromLocalImageRefuses: a local image that is missing, not an
// OCI layout, without the configured index, lacks a manifest or layer, or
// whose bytes differ from their digests is refused with one line naming
// the file, the blob and the rule; nothing is activated and the store
// holds no blob that fails its digest.
func TestInstallFromLocalImageRefuses(t *testing.T) {
	e := newLocalEnv(t)
	plat := "linux/" + runtime.GOARCH
	md := e.p.manifests[plat]
	layer := e.reg.published(t, e.p, 1).Digest
	other := e.p.manifests["linux/"+otherArch()]
	blob := func(dir string, d digest.Digest) string { return filepath.Join(dir, "blobs", "sha256", d.Encoded()) }
	// A copy of the layout, changed by mut, as a directory or an archive.
	variant := func(t *testing.T, archive bool, mut func(dir string)) string {
		dir := filepath.Join(t.TempDir(), "layout")
		if err := os.CopyFS(dir, os.DirFS(e.layout)); err != nil {
			t.Fatal(err)
		}
		mut(dir)
		if !archive {
			return dir
		}
		f := filepath.Join(t.TempDir(), "image.tar")
		tarDir(t, dir, f)
		return f
	}
	rm := func(d digest.Digest) func(string) {
		return func(dir string) { os.Remove(blob(dir, d)) }
	}
	tests := []struct {
		name  string
		from  func(t *testing.T, archive bool) string
		is    error
		wants []string // in the message
	}{
		{"missing", func(t *testing.T, _ bool) string { return filepath.Join(t.TempDir(), "none") }, ErrLocalImage, []string{"does not exist"}},
		{"not a directory or file", func(t *testing.T, _ bool) string { return "/dev/null" }, ErrLocalImage, []string{"/dev/null", "neither a directory"}},
		{"no oci-layout", func(t *testing.T, a bool) string {
			return variant(t, a, func(dir string) { os.Remove(filepath.Join(dir, v1.ImageLayoutFile)) })
		}, ErrLocalImage, []string{"no oci-layout file"}},
		{"bad layout version", func(t *testing.T, a bool) string {
			return variant(t, a, func(dir string) {
				writeFiles(t, dir, map[string]string{v1.ImageLayoutFile: `{"imageLayoutVersion":"2.0.0"}`})
			})
		}, ErrLocalImage, []string{`imageLayoutVersion "2.0.0"`}},
		{"no index blob though index.json names it", func(t *testing.T, a bool) string { return variant(t, a, rm(e.p.index)) },
			ErrLocalImage, []string{"no blob " + e.p.index.String() + " (tag test) though index.json names it"}},
		{"one platform's manifest (skopeo copy without --all)", func(t *testing.T, a bool) string {
			return variant(t, a, func(dir string) {
				rm(e.p.index)(dir)
				writeIndexJSON(t, dir, v1.MediaTypeImageManifest, md, "test")
			})
		}, ErrLocalImage, []string{"holds " + md.String() + " (tag test) but the pin wants " + e.p.index.String() + " (tag test)", "skopeo copy --all", "hbx export"}},
		{"another release", func(t *testing.T, a bool) string {
			return variant(t, a, func(dir string) {
				rm(e.p.index)(dir)
				writeIndexJSON(t, dir, v1.MediaTypeImageIndex, anotherRelease, "v1")
			})
		}, ErrLocalImage, []string{"holds " + anotherRelease.String() + " (tag v1) but the pin wants " + e.p.index.String() + " (tag test)"}},
		{"no platform manifest", func(t *testing.T, a bool) string { return variant(t, a, rm(md)) },
			ErrLocalImage, []string{"fetch manifest " + md.String(), "no blob " + md.String()}},
		{"no layer", func(t *testing.T, a bool) string { return variant(t, a, rm(layer)) },
			ErrLocalImage, []string{"fetch layer " + layer.String(), "no blob " + layer.String()}},
		{"tampered layer", func(t *testing.T, a bool) string {
			return variant(t, a, func(dir string) {
				b, _ := os.ReadFile(blob(dir, layer))
				b[len(b)/2] ^= 1
				os.WriteFile(blob(dir, layer), b, 0o644)
			})
		}, ErrDigestMismatch, []string{"fetch layer " + layer.String(), "does not hash to"}},
		{"swapped manifest", func(t *testing.T, a bool) string {
			return variant(t, a, func(dir string) {
				b, _ := os.ReadFile(blob(dir, other))
				os.WriteFile(blob(dir, md), b, 0o644)
			})
		}, ErrDigestMismatch, []string{"manifest", "got " + other.String() + ", want " + md.String()}},
		{"truncated", func(t *testing.T, a bool) string {
			if !a {
				return variant(t, a, func(dir string) { os.Truncate(blob(dir, layer), 10) })
			}
			f := variant(t, true, func(string) {})
			st, _ := os.Stat(f)
			os.Truncate(f, st.Size()/2)
			return f
		}, nil, nil},
	}
	for _, tt := range tests {
		for _, archive := range []bool{false, true} {
			name := tt.name + map[bool]string{false: "/layout", true: "/archive"}[archive]
			t.Run(name, func(t *testing.T) {
				from := tt.from(t, archive)
				rt := filepath.Join(t.TempDir(), "runtime")
				_, err := Install(context.Background(), e.opts(e.p, func(o *Options) {
					o.RuntimeDir, o.From, o.KeepBlobs, o.Registry = rt, from, true, RegistryOptions{}
				}))
				if err == nil {
					t.Fatalf("Install(From %s) succeeded, want a refusal", from)
				}
				msg := err.Error()
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Errorf("Install(From) = %v, want errors.Is %v", err, tt.is)
				}
				if !errors.Is(err, ErrLocalImage) && !errors.Is(err, ErrDigestMismatch) {
					t.Errorf("Install(From) = %v, want ErrLocalImage or ErrDigestMismatch", err)
				}
				for _, w := range append(tt.wants, from) {
					if !strings.Contains(msg, w) {
						t.Errorf("Install(From) = %q, want it to name %q", msg, w)
					}
				}
				if strings.Contains(tt.name, "another release") && strings.Contains(msg, "skopeo") {
					t.Errorf("Install(From) = %q, want no skopeo hint for an archive of another release", msg)
				}
				if strings.Contains(msg, "the configured image's index") {
					t.Errorf("Install(From) = %q, want the image named by tag and digest", msg)
				}
				t.Log(msg)
				if strings.Contains(msg, "\n") {
					t.Errorf("Install(From) = %q, want one line", msg)
				}
				if currentTarget(t, rt) != "" {
					t.Errorf("a refused local image was activated")
				}
				if bad, err := (blobCache{dir: filepath.Join(rt, release.BlobsDir)}).verifyAll(); err != nil || len(bad) > 0 {
					t.Errorf("store after a refusal: blobs failing their digest %v, %v", bad, err)
				}
				if _, err := os.Lstat(filepath.Join(rt, release.ScratchDir)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("refusal left %s: %v", release.ScratchDir, err)
				}
			})
		}
	}
}

// anotherRelease stands for the index of a release other than the pinned one.
var anotherRelease = digest.FromString("another release")

// writeIndexJSON makes dir's index.json name one image: d of mediaType mt,
// ref.name tag.
func writeIndexJSON(t *testing.T, dir, mt string, d digest.Digest, tag string) {
	t.Helper()
	idx := v1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageIndex, Manifests: []v1.Descriptor{{
		MediaType: mt, Digest: d, Size: 100, Annotations: map[string]string{v1.AnnotationRefName: tag},
	}}}
	b, _ := json.Marshal(idx)
	writeFiles(t, dir, map[string]string{v1.ImageIndexFile: string(b)})
}

// TestInstallFromAnotherReleaseForRestore: restore's install of the
// backup archive's image (Options.Wanted) names it so when the local
// image holds another release.
func TestInstallFromAnotherReleaseForRestore(t *testing.T) {
	e := newLocalEnv(t)
	os.Remove(filepath.Join(e.layout, "blobs", "sha256", e.p.index.Encoded()))
	writeIndexJSON(t, e.layout, v1.MediaTypeImageIndex, anotherRelease, "v1")
	rt := filepath.Join(t.TempDir(), "runtime")
	_, err := Install(context.Background(), e.opts(e.p, func(o *Options) {
		o.RuntimeDir, o.From, o.Wanted, o.Registry = rt, e.layout, "the archive's image", RegistryOptions{}
	}))
	want := "holds " + anotherRelease.String() + " (tag v1) but the archive's image is " + e.p.index.String() + " (tag test)"
	if err == nil || !errors.Is(err, ErrLocalImage) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Install(From another release, Wanted) = %v, want ErrLocalImage saying %q", err, want)
	}
}

// TestInstallFromSkopeoShapes: index.json as other tools write it is
// accepted, the image being found by the configured digest: several
// images in one layout (the configured one not first), and an entry
// without a ref.name.
func TestInstallFromSkopeoShapes(t *testing.T) {
	e := newLocalEnv(t)
	other := e.reg.publish(t, "executor", imageParts{platform: hostPlat, layers: []layerSpec{{tar: baseLayer()}}, config: goodConfig})
	writeLayout(t, e.layout, e.reg, e.p)
	var idx v1.Index
	b, _ := os.ReadFile(filepath.Join(e.layout, v1.ImageIndexFile))
	json.Unmarshal(b, &idx)
	first := v1.Descriptor{MediaType: v1.MediaTypeImageIndex, Digest: other.index, Size: int64(len(e.reg.manifests[other.index.String()].body)),
		Annotations: map[string]string{v1.AnnotationRefName: "other"}}
	idx.Manifests = append([]v1.Descriptor{first}, idx.Manifests...)
	b, _ = json.Marshal(idx)
	writeFiles(t, e.layout, map[string]string{v1.ImageIndexFile: string(b)})
	tarDir(t, e.layout, e.archive)
	for _, from := range []string{e.layout, e.archive} {
		rt := filepath.Join(t.TempDir(), "runtime")
		res, err := Install(context.Background(), e.opts(e.p, func(o *Options) { o.RuntimeDir, o.From = rt, from }))
		if err != nil || res.Release.Meta.IndexDigest != e.p.index {
			t.Fatalf("Install(From %s, two images) = %v; want the configured one", from, err)
		}
	}
	// One entry without a name.
	idx.Manifests = idx.Manifests[1:]
	idx.Manifests[0].Annotations = nil
	b, _ = json.Marshal(idx)
	writeFiles(t, e.layout, map[string]string{v1.ImageIndexFile: string(b)})
	tarDir(t, e.layout, e.archive)
	rt := filepath.Join(t.TempDir(), "runtime")
	if _, err := Install(context.Background(), e.opts(e.p, func(o *Options) { o.RuntimeDir, o.From = rt, e.archive })); err != nil {
		t.Fatalf("Install(From archive, unnamed entry) = %v", err)
	}
}

// TestInstallFromPathWithColon: a local image whose path holds a colon (a
// file named by its time, executor:1.2.tar) is read as any other: the
// image library's reference syntax (PATH:IMAGE) has no say in where hbx
// reads, and an index.json listing several unnamed images is no reason
// to refuse the archive either, since every document is read by digest.
func TestInstallFromPathWithColon(t *testing.T) {
	e := newLocalEnv(t)
	ctx := context.Background()
	dir := t.TempDir()
	layout := filepath.Join(dir, "executor:2026-12-01T10:00")
	if err := os.Rename(e.layout, layout); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "executor:1.2.tar")
	tarDir(t, layout, archive)
	// Two unnamed images in index.json, the wanted one second.
	twice := filepath.Join(t.TempDir(), "layout")
	writeLayout(t, twice, e.reg, e.p)
	var one digest.Digest
	for _, d := range e.p.manifests {
		one = d
	}
	idx := v1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageIndex, Manifests: []v1.Descriptor{
		{MediaType: v1.MediaTypeImageManifest, Digest: one, Size: int64(len(e.reg.manifests[one.String()].body))},
		{MediaType: v1.MediaTypeImageIndex, Digest: e.p.index, Size: int64(len(e.reg.manifests[e.p.index.String()].body))},
	}}
	ib, _ := json.Marshal(idx)
	writeFiles(t, twice, map[string]string{v1.ImageIndexFile: string(ib)})
	unnamed := filepath.Join(t.TempDir(), "unnamed.tar")
	tarDir(t, twice, unnamed)
	for _, from := range []string{layout, archive, unnamed} {
		res, err := Install(ctx, e.opts(e.p, func(o *Options) {
			o.RuntimeDir, o.From = filepath.Join(t.TempDir(), "runtime"), from
		}))
		if err != nil || !res.Changed {
			t.Errorf("Install(From %s) = %+v, %v; want it installed", from, res, err)
		}
	}
}
