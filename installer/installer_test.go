package installer

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/release"
)

var hostPlat = v1.Platform{OS: "linux", Architecture: runtime.GOARCH}

func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

func baseLayer() []byte {
	return tartest.New().
		Dir("usr", 0o755).Dir("usr/local", 0o755).Dir("usr/local/bin", 0o755).
		File("usr/local/bin/bun", "#!/bin/sh\necho 1.3.14\n", 0o755).
		Dir("var", 0o755).Symlink("var/run", "/run").
		Dir("etc", 0o755).File("etc/old.conf", "old", 0o644).
		Dir("etc/replaced", 0o755).File("etc/replaced/a", "a", 0o644).
		Bytes()
}

func appLayer() []byte {
	return tartest.New().
		Dir("app", 0o755).Dir("app/src", 0o755).File("app/src/serve.ts", "console.log(1)\n", 0o644).
		Whiteout("etc", "old.conf").Opaque("etc/replaced").File("etc/replaced/c", "c", 0o644).
		File("var/run/app.pid", "1\n", 0o644).
		Bytes()
}

var goodConfig = v1.ImageConfig{
	Cmd:        []string{"bun", "run", "src/serve.ts"},
	Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PORT=4788"},
	WorkingDir: "/app",
	Volumes:    map[string]struct{}{"/data": {}},
}

func goodParts(plat v1.Platform) imageParts {
	return imageParts{
		platform: plat,
		layers:   []layerSpec{{tar: baseLayer()}, {tar: appLayer(), mediaType: v1.MediaTypeImageLayerZstd}},
		config:   goodConfig,
	}
}

type env struct {
	reg     *fakeRegistry
	runtime string
}

func newEnv(t *testing.T) *env {
	return &env{reg: newFakeRegistry(t), runtime: filepath.Join(t.TempDir(), "runtime")}
}

func (e *env) opts(p published, mut ...func(*Options)) Options {
	o := Options{
		Image:                p.ref,
		Platform:             "linux/" + runtime.GOARCH,
		PlatformDigest:       p.manifests["linux/"+runtime.GOARCH],
		RuntimeDir:           e.runtime,
		MaxUncompressedBytes: 64 << 20,
		Registry:             RegistryOptions{InsecureHosts: []string{e.reg.host()}},
		HbxVersion:           "test",
	}
	for _, m := range mut {
		m(&o)
	}
	return o
}

func currentTarget(t *testing.T, runtimeDir string) string {
	t.Helper()
	s, err := os.Readlink(filepath.Join(runtimeDir, release.CurrentLink))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestInstallColdWarm(t *testing.T) {
	e := newEnv(t)
	p := e.reg.publish(t, "executor", goodParts(hostPlat), goodParts(v1.Platform{OS: "linux", Architecture: otherArch()}))
	ctx := context.Background()

	res, err := Install(ctx, e.opts(p))
	if err != nil {
		t.Fatalf("Install() = %v", err)
	}
	if !res.Changed || res.Fetched != 2 {
		t.Errorf("Install() = %+v, want Changed, 2 blobs fetched", res)
	}
	md := p.manifests["linux/"+runtime.GOARCH]
	if got, want := currentTarget(t, e.runtime), "releases/"+md.Encoded(); got != want {
		t.Errorf("current -> %q, want %q", got, want)
	}
	rootfs := filepath.Join(e.runtime, "current", "rootfs")
	for p, want := range map[string]string{"etc/replaced/c": "c", "run/app.pid": "1\n", "app/src/serve.ts": "console.log(1)\n"} {
		if b, err := os.ReadFile(filepath.Join(rootfs, p)); err != nil || string(b) != want {
			t.Errorf("ReadFile(%s) = %q, %v; want %q", p, b, err, want)
		}
	}
	for _, gone := range []string{"etc/old.conf", "etc/replaced/a", "blobs", "staging", "tmp"} {
		base := rootfs
		if !strings.Contains(gone, "/") {
			base = e.runtime
		}
		if _, err := os.Lstat(filepath.Join(base, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after install, want it gone (%v)", gone, err)
		}
	}
	inst, err := release.Current(e.runtime)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Meta.IndexDigest != p.index || inst.Meta.ManifestDigest != md || len(inst.Meta.DiffIDs) != 2 || inst.Meta.Config.Volumes[0] != "/data" {
		t.Errorf("release.json = %+v", inst.Meta)
	}

	// Warm: no request at all, even with a different tag.
	before := e.reg.requestCount()
	res, err = Install(ctx, e.opts(p, func(o *Options) { o.Image = strings.Replace(o.Image, ":test@", ":v2@", 1) }))
	if err != nil || res.Changed {
		t.Fatalf("warm Install() = %+v, %v; want unchanged", res, err)
	}
	if n := e.reg.requestCount() - before; n != 0 {
		t.Errorf("warm install made %d requests, want 0", n)
	}

	// A release missing its entry program is replaced even without --verify.
	os.Remove(filepath.Join(rootfs, "usr/local/bin/bun"))
	res, err = Install(ctx, e.opts(p))
	if err != nil || !res.Changed || !strings.Contains(res.Reason, `program "bun"`) {
		t.Fatalf("Install() after losing bun = %+v, %v; want a reinstall naming the program", res, err)
	}
	if _, err := os.Stat(filepath.Join(rootfs, "usr/local/bin/bun")); err != nil {
		t.Errorf("bun not restored: %v", err)
	}

	// --verify notices changed content; without it, nothing is hashed.
	os.WriteFile(filepath.Join(rootfs, "app/src/serve.ts"), []byte("tampered"), 0o644)
	if res, err := Install(ctx, e.opts(p)); err != nil || res.Changed {
		t.Fatalf("Install() without verify = %+v, %v; want unchanged", res, err)
	}
	res, err = Install(ctx, e.opts(p, func(o *Options) { o.Verify = true }))
	if err != nil || !res.Changed || !strings.Contains(res.Reason, "app/src/serve.ts") {
		t.Fatalf("Install(--verify) = %+v, %v; want a reinstall naming the file", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(rootfs, "app/src/serve.ts")); string(b) != "console.log(1)\n" {
		t.Errorf("serve.ts = %q after --verify, want it restored", b)
	}
	if res, err := Install(ctx, e.opts(p, func(o *Options) { o.Verify = true })); err != nil || res.Changed {
		t.Errorf("Install(--verify) on a good release = %+v, %v; want unchanged", res, err)
	}
}

func TestInstallNewReleaseKeepsPrevious(t *testing.T) {
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", goodParts(hostPlat))
	if _, err := Install(context.Background(), e.opts(p1)); err != nil {
		t.Fatal(err)
	}
	parts := goodParts(hostPlat)
	parts.config.Env = append(parts.config.Env, "VERSION=2")
	p2 := e.reg.publish(t, "executor", parts)
	if _, err := Install(context.Background(), e.opts(p2)); err != nil {
		t.Fatal(err)
	}
	prev, err := release.Link(e.runtime, release.PreviousLink)
	if err != nil || prev.Meta.IndexDigest != p1.index {
		t.Fatalf("previous = %v, %v; want the first release", prev, err)
	}
	ents, _ := os.ReadDir(filepath.Join(e.runtime, "releases"))
	if len(ents) != 2 {
		t.Errorf("releases/ holds %d entries, want 2 (current and previous)", len(ents))
	}
}

// TestInstallRefuses is the table of hostile images and bad requests. Each
// must fail with the named error class and leave current as it was.
func TestInstallRefuses(t *testing.T) {
	other := v1.Platform{OS: "linux", Architecture: otherArch()}
	cases := []struct {
		name    string
		parts   func() []imageParts
		mut     func(*Options, published)
		lie     func(*fakeRegistry, published)
		wantErr error
		wantMsg string
	}{
		{name: "pinned platform digest differs", parts: func() []imageParts { return []imageParts{goodParts(hostPlat)} },
			mut: func(o *Options, _ published) { o.PlatformDigest = digest.FromString("other") }, wantErr: ErrDigestMismatch, wantMsg: "pinned"},
		{name: "platform missing from the index", parts: func() []imageParts { return []imageParts{goodParts(other)} },
			mut: func(o *Options, _ published) { o.PlatformDigest = "" }, wantErr: ErrPlatform, wantMsg: "has linux/" + otherArch()},
		{name: "config platform disagrees with index", parts: func() []imageParts {
			p := goodParts(hostPlat)
			p.configPlatform = &other
			return []imageParts{p}
		}, wantErr: ErrPlatform},
		{name: "index bytes do not match the pinned digest", parts: func() []imageParts { return []imageParts{goodParts(hostPlat)} },
			lie: func(r *fakeRegistry, p published) {
				m := r.manifests[p.index.String()]
				r.manifests[p.index.String()] = served{append(append([]byte(nil), m.body...), ' '), m.mediaType}
			}, wantErr: ErrDigestMismatch, wantMsg: "index"},
		{name: "manifest served for another digest", parts: func() []imageParts { return []imageParts{goodParts(hostPlat)} },
			lie: func(r *fakeRegistry, p published) {
				m := r.manifests[p.manifests["linux/"+runtime.GOARCH].String()]
				r.manifests[p.manifests["linux/"+runtime.GOARCH].String()] = served{append(append([]byte(nil), m.body...), '\n'), m.mediaType}
			}, mut: func(o *Options, _ published) { o.PlatformDigest = "" }, wantErr: ErrDigestMismatch, wantMsg: "manifest"},
		{name: "blob bytes do not match their digest", parts: func() []imageParts {
			p := goodParts(hostPlat)
			p.layers[1].wrongBlob = true
			return []imageParts{p}
		}, wantErr: ErrDigestMismatch, wantMsg: "fetch layer"},
		{name: "diff_id mismatch", parts: func() []imageParts {
			p := goodParts(hostPlat)
			p.layers[0].wrongDiff = true
			return []imageParts{p}
		}, wantErr: ErrDigestMismatch, wantMsg: "diff_id"},
		{name: "invalid layer digest string", parts: func() []imageParts {
			p := goodParts(hostPlat)
			p.layers[0].badDigest = "sha256:../../../../etc/passwd"
			return []imageParts{p}
		}, wantMsg: `layer 0 digest "sha256:../../../../etc/passwd"`},
		{name: "unsupported layer media type", parts: func() []imageParts {
			p := goodParts(hostPlat)
			p.layers[0].mediaType = "application/vnd.oci.image.layer.v1.tar+gzip+encrypted"
			return []imageParts{p}
		}, wantErr: ErrUnsupported},
		{name: "foreign layer", parts: func() []imageParts {
			p := goodParts(hostPlat)
			p.layers[0].foreignURL = true
			return []imageParts{p}
		}, wantErr: ErrUnsupported},
		{name: "traversal in a layer", parts: func() []imageParts {
			p := goodParts(hostPlat)
			p.layers = append(p.layers, layerSpec{tar: tartest.New().File("../../escape", "x", 0o644).Bytes()})
			return []imageParts{p}
		}, wantErr: extract.ErrUnsafePath},
		{name: "device node in a layer", parts: func() []imageParts {
			p := goodParts(hostPlat)
			p.layers = append(p.layers, layerSpec{tar: tartest.New().Header(&tarHeaderChar, nil).Bytes()})
			return []imageParts{p}
		}, wantErr: extract.ErrUnsupportedType},
		{name: "compression bomb", parts: func() []imageParts {
			p := goodParts(hostPlat)
			p.layers = append(p.layers, layerSpec{tar: tartest.New().File("zeros", strings.Repeat("\x00", 2<<20), 0o644).Bytes()})
			return []imageParts{p}
		}, mut: func(o *Options, _ published) { o.MaxUncompressedBytes = 1 << 20 }, wantErr: extract.ErrTooLarge},
		{name: "entry program missing", parts: func() []imageParts {
			p := goodParts(hostPlat)
			p.config.Cmd = []string{"node", "serve.js"}
			return []imageParts{p}
		}, wantErr: ErrUnrunnable, wantMsg: `program "node"`},
		{name: "entry program is an ELF for another architecture", parts: func() []imageParts {
			p := goodParts(hostPlat)
			p.layers = append(p.layers, layerSpec{tar: tartest.New().File("usr/local/bin/bun", string(craftELF(elfMachines[otherArch()], "")), 0o755).Bytes()})
			return []imageParts{p}
		}, wantErr: ErrUnrunnable, wantMsg: "/usr/local/bin/bun is an ELF for " + otherArch()},
		{name: "reference without a tag", parts: func() []imageParts { return []imageParts{goodParts(hostPlat)} },
			mut: func(o *Options, p published) { o.Image = strings.Replace(o.Image, ":test@", "@", 1) }, wantErr: ErrBadReference},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			// A good release is active first; it must survive.
			gp := goodParts(hostPlat)
			gp.config.Env = append(gp.config.Env, "GOOD=1") // distinct from every bad image
			good := e.reg.publish(t, "good", gp)
			if _, err := Install(context.Background(), e.opts(good)); err != nil {
				t.Fatal(err)
			}
			before := currentTarget(t, e.runtime)
			p := e.reg.publish(t, "bad", c.parts()...)
			if c.lie != nil {
				c.lie(e.reg, p)
			}
			o := e.opts(p, func(o *Options) { o.ExtractAll = true }) // every layer read, none reused from the good one
			if c.mut != nil {
				c.mut(&o, p)
			}
			_, err := Install(context.Background(), o)
			if err == nil || (c.wantErr != nil && !errors.Is(err, c.wantErr)) || !strings.Contains(err.Error(), c.wantMsg) {
				t.Fatalf("Install() = %v; want %v containing %q", err, c.wantErr, c.wantMsg)
			}
			if got := currentTarget(t, e.runtime); got != before {
				t.Errorf("current -> %q after a refused install, want %q", got, before)
			}
			if ents, _ := os.ReadDir(filepath.Join(e.runtime, "staging")); len(ents) != 0 {
				t.Errorf("staging holds %d entries after a refused install", len(ents))
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(e.runtime), "escape")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a file escaped the runtime directory")
			}
		})
	}
}

func TestInstallLocked(t *testing.T) {
	e := newEnv(t)
	p := e.reg.publish(t, "executor", goodParts(hostPlat))
	os.MkdirAll(e.runtime, 0o755)
	l, err := lock.Acquire(context.Background(), filepath.Join(e.runtime, "hbx.lock"), "hbx backup", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Install(context.Background(), e.opts(p))
	if !lock.IsLocked(err) || !strings.Contains(err.Error(), "hbx backup") {
		t.Fatalf("Install() under a held lock = %v; want ErrLocked naming the holder", err)
	}
	if e.reg.requestCount() != 0 {
		t.Errorf("a locked-out install made %d requests", e.reg.requestCount())
	}
	l.Unlock()
}

func TestInstallResumesFromCompleteBlobs(t *testing.T) {
	e := newEnv(t)
	p := e.reg.publish(t, "executor", goodParts(hostPlat))
	// A previous run died after the first blob and during the second.
	first := e.reg.published(t, p, 0)
	cache := blobCache{dir: filepath.Join(e.runtime, release.BlobsDir)}
	os.MkdirAll(filepath.Dir(cache.path(first.Digest)), 0o700)
	os.WriteFile(cache.path(first.Digest), e.reg.blobs[first.Digest], 0o600)
	second := e.reg.published(t, p, 1)
	os.WriteFile(filepath.Join(filepath.Dir(cache.path(second.Digest)), ".tmp-"+second.Digest.Encoded()+"-dead"), []byte("partial"), 0o600)

	res, err := Install(context.Background(), e.opts(p, func(o *Options) { o.KeepBlobs = true }))
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != 1 || res.Reused != 1 {
		t.Errorf("Install() fetched %d, reused %d; want 1 and 1", res.Fetched, res.Reused)
	}
	if n := e.reg.blobRequests(); n != 2 { // config + the missing layer
		t.Errorf("blob requests = %d, want 2 (config and one layer)", n)
	}
	ents, _ := os.ReadDir(filepath.Dir(cache.path(second.Digest)))
	for _, en := range ents {
		if strings.HasPrefix(en.Name(), ".tmp-") {
			t.Errorf("temporary blob %s left behind", en.Name())
		}
	}
}

// TestConcurrentInstalls: the second install waits for the first, then finds
// the release active and makes no request; its log names the holder.
func TestConcurrentInstalls(t *testing.T) {
	e := newEnv(t)
	p := e.reg.publish(t, "executor", goodParts(hostPlat))
	gate := make(chan struct{})
	e.reg.mu.Lock()
	e.reg.gate = gate
	e.reg.mu.Unlock()

	first := make(chan error, 1)
	go func() {
		_, err := Install(context.Background(), e.opts(p))
		first <- err
	}()
	// Wait until the first install holds the lock and is fetching.
	for e.reg.requestCount() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	var logs strings.Builder
	waiting := make(chan struct{})
	second := make(chan *Result, 1)
	go func() {
		res, err := Install(context.Background(), e.opts(p, func(o *Options) {
			o.LockWait = 30 * time.Second
			o.Logger = slog.New(slog.NewTextHandler(&syncWriter{w: &logs, onWrite: func() { closeOnce(waiting) }}, nil))
		}))
		if err != nil {
			t.Errorf("second Install() = %v", err)
		}
		second <- res
	}()
	<-waiting
	close(gate)
	if err := <-first; err != nil {
		t.Fatalf("first Install() = %v", err)
	}
	after := e.reg.requestCount()
	res := <-second
	if res == nil || res.Changed {
		t.Fatalf("second Install() = %+v, want unchanged", res)
	}
	if n := e.reg.requestCount() - after; n != 0 {
		t.Errorf("second install made %d requests after the first finished, want 0", n)
	}
	if !strings.Contains(logs.String(), "waiting for the runtime directory's lock") || !strings.Contains(logs.String(), "hbx install") {
		t.Errorf("log %q does not say who held the lock", logs.String())
	}
}

type syncWriter struct {
	mu      sync.Mutex
	w       *strings.Builder
	onWrite func()
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.w.Write(p)
	s.onWrite()
	return n, err
}

var closeMu sync.Mutex

func closeOnce(c chan struct{}) {
	closeMu.Lock()
	defer closeMu.Unlock()
	select {
	case <-c:
	default:
		close(c)
	}
}
