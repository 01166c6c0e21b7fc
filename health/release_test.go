package health

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/release"
)

// fakeRelease is an installed release as the installer leaves it:
// current -> releases/<manifest hex> with release.json, manifest.json,
// config.json and a rootfs holding the program and working directory.
type fakeRelease struct {
	runtimeDir string
	dir        string
	meta       release.Meta
	want       ReleaseWant
}

func newFakeRelease(t *testing.T) *fakeRelease {
	t.Helper()
	layer := digest.FromString("layer")
	diffID := digest.FromString("diff")
	cfg := v1.Image{
		Platform: v1.Platform{OS: "linux", Architecture: "amd64"},
		Config: v1.ImageConfig{
			Cmd:        []string{"bun", "run", "src/serve.ts"},
			Env:        []string{"PATH=/usr/local/bin:/usr/bin", "PORT=4788"},
			WorkingDir: "/app/apps/host-selfhost",
		},
		RootFS: v1.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
	}
	cfgBytes, _ := json.Marshal(cfg)
	man := v1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageManifest,
		Config:    v1.Descriptor{MediaType: v1.MediaTypeImageConfig, Digest: digest.FromBytes(cfgBytes), Size: int64(len(cfgBytes))},
		Layers:    []v1.Descriptor{{MediaType: v1.MediaTypeImageLayerGzip, Digest: layer, Size: 1}},
	}
	manBytes, _ := json.Marshal(man)
	md := digest.FromBytes(manBytes)
	index := digest.FromString("index")
	rt := t.TempDir()
	dir := filepath.Join(rt, release.ReleasesDir, md.Encoded())
	f := &fakeRelease{runtimeDir: rt, dir: dir, meta: release.Meta{
		Format: release.MetaFormat, Image: "127.0.0.1:5000/executor:v1@" + index.String(),
		IndexDigest: index, ManifestDigest: md, ConfigDigest: man.Config.Digest, Platform: "linux/amd64",
		Layers: []digest.Digest{layer}, DiffIDs: []digest.Digest{diffID}, InstalledAt: time.Unix(0, 0).UTC(),
		Config: release.ImageConfig{Cmd: cfg.Config.Cmd, Env: cfg.Config.Env, WorkingDir: cfg.Config.WorkingDir},
	}, want: ReleaseWant{RuntimeDir: rt, Target: release.Target{IndexDigest: index, Platform: "linux/amd64", ManifestDigest: md}}}
	for _, d := range []string{"rootfs/usr/local/bin", "rootfs/app/apps/host-selfhost"} {
		mkdir(t, filepath.Join(dir, d))
	}
	write(t, filepath.Join(dir, "rootfs/usr/local/bin/bun"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(dir, release.ManifestFile), string(manBytes), 0o644)
	write(t, filepath.Join(dir, release.ConfigFile), string(cfgBytes), 0o644)
	f.writeMeta(t)
	if err := os.Symlink(filepath.Join(release.ReleasesDir, md.Encoded()), filepath.Join(rt, release.CurrentLink)); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeRelease) writeMeta(t *testing.T) {
	t.Helper()
	b, _ := json.Marshal(f.meta)
	write(t, filepath.Join(f.dir, release.MetaFile), string(b), 0o644)
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p, s string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func TestRelease(t *testing.T) {
	other := digest.FromString("other")
	tests := []struct {
		name    string
		deep    bool
		mutate  func(t *testing.T, f *fakeRelease)
		wantIs  error
		wantErr string // "" for a pass
	}{
		{"as installed", false, nil, nil, ""},
		{"as installed, deep", true, nil, nil, ""},
		{"not pinned", true, func(t *testing.T, f *fakeRelease) { f.want.ManifestDigest = "" }, nil, ""},
		{"no release", false, func(t *testing.T, f *fakeRelease) { os.Remove(filepath.Join(f.runtimeDir, release.CurrentLink)) },
			release.ErrNoRelease, "current does not exist"},
		{"recorded index differs", false, func(t *testing.T, f *fakeRelease) { f.meta.IndexDigest = other; f.writeMeta(t) },
			ErrReleaseMismatch, "installed index " + other.String() + ", configured"},
		{"configured pin differs", false, func(t *testing.T, f *fakeRelease) { f.want.ManifestDigest = other },
			ErrReleaseMismatch, "pinned " + other.String()},
		{"other platform", false, func(t *testing.T, f *fakeRelease) { f.want.Platform = "linux/arm64" },
			ErrReleaseMismatch, "installed platform linux/amd64, configured linux/arm64"},
		{"recorded manifest is not the directory", false, func(t *testing.T, f *fakeRelease) { f.meta.ManifestDigest = other; f.writeMeta(t) },
			ErrReleaseMismatch, "records manifest " + other.String()},
		{"program missing", false, func(t *testing.T, f *fakeRelease) { os.Remove(filepath.Join(f.dir, "rootfs/usr/local/bin/bun")) },
			release.ErrCorrupt, `program "bun"`},
		{"manifest tampered, shallow", false, func(t *testing.T, f *fakeRelease) { appendTo(t, filepath.Join(f.dir, release.ManifestFile), " ") }, nil, ""},
		{"manifest tampered", true, func(t *testing.T, f *fakeRelease) { appendTo(t, filepath.Join(f.dir, release.ManifestFile), " ") },
			ErrReleaseMismatch, "manifest.json hashes to sha256:"},
		{"config tampered", true, func(t *testing.T, f *fakeRelease) { appendTo(t, filepath.Join(f.dir, release.ConfigFile), " ") },
			ErrReleaseMismatch, "config.json hashes to sha256:"},
		{"manifest missing", true, func(t *testing.T, f *fakeRelease) { os.Remove(filepath.Join(f.dir, release.ManifestFile)) },
			release.ErrCorrupt, "no manifest.json in"},
		{"recorded config digest differs", true, func(t *testing.T, f *fakeRelease) { f.meta.ConfigDigest = other; f.writeMeta(t) },
			ErrReleaseMismatch, "the manifest names config"},
		{"recorded layers differ", true, func(t *testing.T, f *fakeRelease) { f.meta.Layers = []digest.Digest{other}; f.writeMeta(t) },
			ErrReleaseMismatch, "the manifest's layers differ"},
		{"recorded diff_ids differ", true, func(t *testing.T, f *fakeRelease) { f.meta.DiffIDs = nil; f.writeMeta(t) },
			ErrReleaseMismatch, "the config's diff_ids differ"},
		{"recorded command differs", true, func(t *testing.T, f *fakeRelease) { f.meta.Config.Cmd = []string{"sh"}; f.writeMeta(t) },
			ErrReleaseMismatch, "the config's Entrypoint, Cmd"},
		{"working directory missing, deep", true, func(t *testing.T, f *fakeRelease) {
			os.RemoveAll(filepath.Join(f.dir, "rootfs/app"))
		}, release.ErrCorrupt, `working directory "/app/apps/host-selfhost"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeRelease(t)
			if tt.mutate != nil {
				tt.mutate(t, f)
			}
			f.want.Deep = tt.deep
			_, err := Release(f.want)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Release() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.wantIs) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Release() = %v, want %v containing %q", err, tt.wantIs, tt.wantErr)
			}
		})
	}
}

func appendTo(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(s)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseCheckChange: check release fails with ReleaseWant.Change's
// error while a release change is half done, even when current is the
// configured release, and passes once Change says nothing is.
func TestReleaseCheckChange(t *testing.T) {
	f := newFakeRelease(t)
	half := errors.New("upgrade to v2 interrupted in phase activating: run `hbx rollback`")
	var pending error = half
	f.want.Change = func() error { return pending }
	rep, err := Run(context.Background(), Options{Release: f.want}, []string{CheckRelease})
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Checks[0]; c.Status != Fail || !strings.Contains(c.Reason, half.Error()) {
		t.Errorf("check release while a change is half done: %s %q, want fail naming it", c.Status, c.Reason)
	}
	pending = nil
	if rep, _ = Run(context.Background(), Options{Release: f.want}, []string{CheckRelease}); rep.Checks[0].Status != Pass {
		t.Errorf("check release once nothing is half done: %s %q, want pass", rep.Checks[0].Status, rep.Checks[0].Reason)
	}
}
