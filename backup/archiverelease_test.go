package backup

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/testenv"
)

// Releases of the tests below: the configured one, another release of its
// repository (the archives' by default, box.options), and one of a
// repository the box does not run.
var (
	sameRepoImage = "127.0.0.1:5000/x:v1@sha256:" + strings.Repeat("a", 64)
	foreignImage  = "evil.example/y:v1@sha256:" + strings.Repeat("c", 64)
)

// rewritePlain rewrites the manifest of the plain .tar.gz at p with edit
// (as anyone who can write the file can), dropping the .sha256 and .json
// files beside it.
func rewritePlain(t *testing.T, p string, edit func(m map[string]any)) {
	t.Helper()
	f, err := os.Open(p)
	must(t, err)
	zr, err := gzip.NewReader(f)
	must(t, err)
	tr := tar.NewReader(zr)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	for first := true; ; first = false {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(t, err)
		body, err := io.ReadAll(tr)
		must(t, err)
		if first {
			var m map[string]any
			must(t, json.Unmarshal(body, &m))
			edit(m)
			body, err = json.Marshal(m)
			must(t, err)
			h.Size = int64(len(body))
		}
		must(t, tw.WriteHeader(h))
		_, err = tw.Write(body)
		must(t, err)
	}
	must(t, tw.Close())
	must(t, zw.Close())
	f.Close()
	must(t, os.WriteFile(p, out.Bytes(), 0o600))
	_ = os.Remove(p + sumSuffix)
	_ = os.Remove(p + infoSuffix)
}

// setImage makes a manifest edit naming image (index digest and a child
// manifest digest along).
func setImage(image string) func(map[string]any) {
	return func(m map[string]any) {
		_, idx, _ := strings.Cut(image, "@")
		m["image"], m["index_digest"], m["manifest_digest"] = image, idx, digest.FromString(image+" child").String()
	}
}

// TestRestoreArchiveRelease: a restore brings back only a release of the
// repository the box runs, and an archive that is not encrypted with the
// box's passphrase changes the runtime only when the operator names its
// image (--accept-image); every refusal changes nothing (issue 25 item
// 1: a plain archive decided which code ran as root).
func TestRestoreArchiveRelease(t *testing.T) {
	tests := []struct {
		name      string
		encrypted bool
		image     string // the archive's image (box.options' when "")
		edit      func(map[string]any)
		accept    string
		wantErr   error
		// wantInstall is the image installed ("" none), wantPin the one
		// pinned ("" none).
		wantInstall, wantPin string
		// wantSay is in the error, ARCHIVE replaced by the archive's path.
		wantSay string
	}{
		{name: "plain, another repository", edit: setImage(foreignImage), wantErr: ErrImageRefused},
		{name: "plain, another repository, accepted", edit: setImage(foreignImage), accept: foreignImage, wantErr: ErrImageRefused},
		{name: "plain, another release", edit: setImage(sameRepoImage), wantErr: ErrImageRefused, wantSay: ": hbx restore ARCHIVE --accept-image " + sameRepoImage},
		{name: "plain, another release, accepted", edit: setImage(sameRepoImage), accept: sameRepoImage, wantInstall: sameRepoImage, wantPin: sameRepoImage},
		{name: "plain, accepted another image", edit: setImage(sameRepoImage), accept: foreignImage, wantErr: ErrImageRefused, wantSay: "archive refused: --accept-image " + foreignImage + " is not the archive's image " + sameRepoImage},
		{name: "plain, accepted a tag only", edit: setImage(sameRepoImage), accept: "registry.example/x:1.2", wantErr: ErrInvalid},
		{name: "plain, the configured release", edit: setImage(priorImage), wantInstall: priorImage},
		{name: "encrypted, another repository", encrypted: true, image: foreignImage, wantErr: ErrImageRefused},
		{name: "encrypted, another release", encrypted: true, image: sameRepoImage, wantInstall: sameRepoImage, wantPin: sameRepoImage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBox(t)
			write(t, b.data, "db 0600 archived database")
			res := b.backup(func(o *Options) {
				o.Encrypt = tt.encrypted
				if tt.image != "" {
					o.Image = tt.image
				}
			})
			if tt.edit != nil {
				rewritePlain(t, res.Path, tt.edit)
			}
			must(t, os.WriteFile(b.data+"/db", []byte("live database"), 0o600))
			before := snapshot(t, b.data)
			rt := &stubRuntime{runtimeDir: b.runtime}
			cfg := &pinRecorder{image: priorImage}
			opts := b.restoreOptions(res.Path)
			opts.Runtime, opts.Config, opts.Image, opts.Platform, opts.AcceptImage = rt, cfg, priorImage, "linux/amd64", tt.accept
			_, err := Restore(context.Background(), opts)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Restore() = %v, want %v", err, tt.wantErr)
			}
			gotInstall := strings.Join(rt.installs, ",")
			if gotInstall != tt.wantInstall {
				t.Errorf("installed %q, want %q", gotInstall, tt.wantInstall)
			}
			wantPin := tt.wantPin
			if wantPin == "" {
				wantPin = priorImage
			}
			if cfg.image != wantPin {
				t.Errorf("pinned %q, want %q", cfg.image, wantPin)
			}
			if say := strings.ReplaceAll(tt.wantSay, "ARCHIVE", ShellWord(res.Path)); err != nil && !strings.Contains(err.Error(), say) {
				t.Errorf("Restore() = %v, want it saying %q", err, say)
			}
			if err != nil {
				if got := snapshot(t, b.data); strings.Join(got, "\n") != strings.Join(before, "\n") {
					t.Errorf("a refused restore changed the data:\n%s", strings.Join(got, "\n"))
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("Restore() error has several lines: %q", err)
				}
			}
		})
	}
}

// TestRestorePlainArchiveManifestDigestIgnored: a plain archive naming the
// configured image with a made-up child manifest digest installs and
// awaits the configured pin, not the archive's digest (which could never
// be had, and the data would wait for it forever).
func TestRestorePlainArchiveManifestDigestIgnored(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "db 0600 archived database")
	res := b.backup(func(o *Options) { o.Encrypt = false; o.Image = priorImage })
	rewritePlain(t, res.Path, func(m map[string]any) { m["manifest_digest"] = digest.FromString("made up").String() })
	rt := &manifestRecorder{stubRuntime: stubRuntime{runtimeDir: b.runtime}}
	opts := b.restoreOptions(res.Path)
	opts.Runtime, opts.Config, opts.Image, opts.Platform = rt, &pinRecorder{image: priorImage, manifest: archManifest}, priorImage, "linux/amd64"
	if _, err := Restore(context.Background(), opts); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	if len(rt.manifests) != 1 || rt.manifests[0] != archManifest {
		t.Errorf("installed with manifests %q, want the configured pin %s", rt.manifests, archManifest)
	}
}

// manifestRecorder is stubRuntime recording the manifest digests asked.
type manifestRecorder struct {
	stubRuntime
	manifests []digest.Digest
}

func (m *manifestRecorder) Install(ctx context.Context, image, platform string, d digest.Digest) (bool, error) {
	m.manifests = append(m.manifests, d)
	return m.stubRuntime.Install(ctx, image, platform, d)
}

// TestRestorePlainArchiveOwnersAndPaths: an archive that is not
// authenticated decides no owner (every entry of the data directory gets
// executor.user's) and replaces no extra path (refused unless DataOnly).
func TestRestorePlainArchiveOwnersAndPaths(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "owners are kept only by root")
	}
	b := newBox(t)
	extra := b.root + "/srv/extra"
	write(t, b.data, "db 0600 archived", "db owner 1234:1234", "sub/ 0700", "sub owner 1234:1234")
	must(t, os.MkdirAll(extra, 0o700))
	write(t, extra, "x 0600 extra")
	res := b.backup(func(o *Options) { o.Encrypt = false; o.Paths = []string{extra} })
	opts := b.restoreOptions(res.Path)
	opts.AllowedPaths = []string{extra}
	if _, err := Restore(context.Background(), opts); !errors.Is(err, ErrImageRefused) {
		t.Fatalf("Restore() of a plain archive with extra paths = %v, want ErrImageRefused", err)
	}
	opts.DataOnly = true
	if _, err := Restore(context.Background(), opts); err != nil {
		t.Fatalf("Restore(DataOnly) = %v", err)
	}
	for _, p := range []string{"db", "sub"} {
		st, err := os.Stat(b.data + "/" + p)
		must(t, err)
		if uid, gid := ownerOf(st); uid != opts.Owner.UID || gid != opts.Owner.GID {
			t.Errorf("%s owned by %d:%d, want executor.user's %d:%d", p, uid, gid, opts.Owner.UID, opts.Owner.GID)
		}
	}
}

// TestSelfContradictingManifestRefused: a manifest whose image and
// index_digest disagree (or whose image or platform is not one) is
// refused as damaged before anything changes, by restore and verify alike
// (issue 25 item 3: the restore waited for an image no install could
// bring).
func TestSelfContradictingManifestRefused(t *testing.T) {
	tests := []struct {
		name string
		edit func(map[string]any)
	}{
		{"index digest of another image", func(m map[string]any) { m["index_digest"] = "sha256:" + strings.Repeat("d", 64) }},
		{"image without a digest", func(m map[string]any) { m["image"] = "127.0.0.1:5000/x:v1" }},
		{"not a platform", func(m map[string]any) { m["platform"] = "linux" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBox(t)
			write(t, b.data, "db 0600 archived database")
			res := b.backup(func(o *Options) { o.Encrypt = false })
			rewritePlain(t, res.Path, tt.edit)
			if _, err := Verify(context.Background(), res.Path, nil); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "contradicts itself") {
				t.Errorf("Verify() = %v, want ErrCorrupt saying the manifest contradicts itself", err)
			}
			rt := &stubRuntime{runtimeDir: b.runtime}
			opts := b.restoreOptions(res.Path)
			opts.Runtime, opts.Image, opts.Platform = rt, b.options().Image, "linux/amd64"
			if _, err := Restore(context.Background(), opts); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Restore() = %v, want ErrCorrupt", err)
			}
			if len(rt.installs) != 0 {
				t.Errorf("installed %q", rt.installs)
			}
			if j, _ := readJournal(b.data); j != nil {
				t.Errorf("a journal is left: %+v", j)
			}
		})
	}
}

// ownerOf is st's numeric owner.
func ownerOf(st os.FileInfo) (uid, gid int) {
	s := st.Sys().(*syscall.Stat_t)
	return int(s.Uid), int(s.Gid)
}

// TestRestorePlainArchiveSymlinks: an archive that is not authenticated
// plants no symlink leading out of the data directory (one the payload
// would follow to a path the archive chose); the same symlinks from an
// authenticated archive are restored verbatim.
func TestRestorePlainArchiveSymlinks(t *testing.T) {
	tests := []struct {
		name, link string
		encrypted  bool
		wantErr    error
	}{
		{"absolute", "key => /etc/shadow", false, ErrImageRefused},
		{"climbing out", "sub/key => ../../outside", false, ErrImageRefused},
		{"inside", "sub/key => ../db", false, nil},
		{"absolute, authenticated", "key => /etc/shadow", true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBox(t)
			write(t, b.data, "db 0600 archived", "sub/ 0700", tt.link)
			res := b.backup(func(o *Options) { o.Encrypt = tt.encrypted })
			must(t, os.WriteFile(b.data+"/db", []byte("live"), 0o600))
			_, err := Restore(context.Background(), b.restoreOptions(res.Path))
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Restore() = %v, want %v", err, tt.wantErr)
			}
			want := "archived"
			if err != nil {
				want = "live"
			}
			if got, _ := os.ReadFile(b.data + "/db"); string(got) != want {
				t.Errorf("db = %q, want %q", got, want)
			}
		})
	}
}
