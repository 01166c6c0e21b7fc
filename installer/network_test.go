package installer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermesbox/hbx/release"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/internal/registrytest"
	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
)

// These tests run Install against the real registry (docker-registry, see
// package testenv), through registrytest.Proxy where the network misbehaves.
// Timings are scaled down: a 300ms stall timeout and 10ms backoff.

const (
	netStall   = 300 * time.Millisecond
	netRetries = 2
	netRepo    = "hbx/net"
)

// netImage is the image the network tests pull: for the host platform three
// gzip layers, the last one netBigLayerBytes of incompressible bytes, so
// that faults can strike mid-body; one small image for the other platform.
type netImage struct {
	*registrytest.Image
	ref   func(host string) string // image reference through host
	plat  string                   // "linux/<GOARCH>"
	layer digest.Digest            // the big layer
}

const netBigLayerBytes = 48 << 10

func netPlatformImage(arch, env string) registrytest.PlatformImage {
	rnd := rand.New(rand.NewChaCha8([32]byte{'h', 'b', 'x'}))
	noise := make([]byte, netBigLayerBytes)
	for i := range noise {
		noise[i] = byte(rnd.Uint32())
	}
	cfg := goodConfig
	cfg.Env = append(append([]string(nil), cfg.Env...), env)
	return registrytest.PlatformImage{
		Platform: v1.Platform{OS: "linux", Architecture: arch},
		Layers: [][]byte{
			baseLayer(),
			appLayer(),
			tartest.New().Dir("app/data", 0o755).File("app/data/noise", string(noise), 0o644).Bytes(),
		},
		Config: cfg,
	}
}

// pushNetImage builds the image (env distinguishes images) and pushes it to
// the registry at base as netRepo:tag.
func pushNetImage(t *testing.T, base, tag, env string) *netImage {
	t.Helper()
	img, err := registrytest.NewImage(netPlatformImage(runtime.GOARCH, env), netPlatformImage(otherArch(), env))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := img.Push(ctx, base, netRepo, tag); err != nil {
		t.Fatal(err)
	}
	plat := "linux/" + runtime.GOARCH
	return &netImage{
		Image: img,
		ref:   func(host string) string { return host + "/" + netRepo + ":" + tag + "@" + img.Index.String() },
		plat:  plat,
		layer: img.Layers[plat][2].Digest,
	}
}

// netOptions installs img through host into a fresh runtime directory,
// with the scaled-down network policy.
func netOptions(t *testing.T, img *netImage, host string, mut ...func(*Options)) Options {
	o := Options{
		Image:                img.ref(host),
		Platform:             img.plat,
		PlatformDigest:       img.Manifests[img.plat],
		RuntimeDir:           filepath.Join(t.TempDir(), "runtime"),
		MaxUncompressedBytes: 64 << 20,
		// Parallel tests may fork (a smoke command); a fork can briefly
		// share another test's lock descriptor (internal/lock releases by
		// close), so wait rather than fail.
		LockWait: 10 * time.Second,
		Registry: RegistryOptions{
			InsecureHosts: []string{"127.0.0.1"},
			StallTimeout:  netStall,
			Retries:       netRetries,
			Backoff:       10 * time.Millisecond,
		},
		HbxVersion: "test",
	}
	for _, m := range mut {
		m(&o)
	}
	return o
}

// manifestPath is the distribution API path of a manifest of netRepo.
func manifestPath(d digest.Digest) string { return "/v2/" + netRepo + "/manifests/" + d.String() }

// TestInstallNetworkFaults: one fault of each kind on each kind of request
// is survived by a retry (or, for the slow drip, by not being killed); a
// fault that persists fails after exactly retries+1 attempts with an error
// naming the request, the registry and the cause; with fewer failures than
// retries the install succeeds.
func TestInstallNetworkFaults(t *testing.T) {
	reg := testenv.StartRegistry(t)
	img := pushNetImage(t, reg.URL(), "test", "IMAGE=net")
	plat := img.plat
	index, man, cfg, layer := img.Index, img.Manifests[plat], img.Configs[plat], img.layer
	small := img.Layers[plat][0].Digest
	const mid = 16 << 10 // bytes into the big layer where mid-body faults strike
	type count struct {
		kind registrytest.Kind
		path digest.Digest
		want int
	}
	cases := []struct {
		name    string
		rules   []registrytest.Rule
		retries int           // default netRetries
		wantErr string        // "" for success; else the whole message, %s = proxy host
		wantIs  error         // errors.Is target when failing
		counts  []count       // requests the proxy must have seen
		minTook time.Duration // the install took at least this long
	}{
		// One fault, then success.
		{name: "ping answers 503 once", rules: []registrytest.Rule{{Kind: registrytest.Ping, Times: 1, Fault: registrytest.Status(503)}}},
		{name: "index never answers once", rules: []registrytest.Rule{{Path: index.String(), Times: 1, Fault: registrytest.Hang()}},
			counts: []count{{registrytest.Manifest, index, 2}}},
		{name: "index stalls mid-body once", rules: []registrytest.Rule{{Path: index.String(), Times: 1, Fault: registrytest.StallAfter(100)}},
			counts: []count{{registrytest.Manifest, index, 2}}},
		{name: "index reset once", rules: []registrytest.Rule{{Path: index.String(), Times: 1, Fault: registrytest.ResetAfter(50)}},
			counts: []count{{registrytest.Manifest, index, 2}}},
		{name: "manifest stalls mid-body once", rules: []registrytest.Rule{{Path: man.String(), Times: 1, Fault: registrytest.StallAfter(100)}},
			counts: []count{{registrytest.Manifest, man, 2}}},
		{name: "manifest cut short once", rules: []registrytest.Rule{{Path: man.String(), Times: 1, Fault: registrytest.CutAfter(100)}},
			counts: []count{{registrytest.Manifest, man, 2}}},
		{name: "manifest answers 503 once", rules: []registrytest.Rule{{Path: man.String(), Times: 1, Fault: registrytest.Status(503)}},
			counts: []count{{registrytest.Manifest, man, 2}}},
		{name: "config never answers once", rules: []registrytest.Rule{{Path: cfg.String(), Times: 1, Fault: registrytest.Hang()}},
			counts: []count{{registrytest.Blob, cfg, 2}}},
		{name: "config answers 502 once", rules: []registrytest.Rule{{Path: cfg.String(), Times: 1, Fault: registrytest.Status(502)}},
			counts: []count{{registrytest.Blob, cfg, 2}}},
		{name: "layer stalls mid-body once", rules: []registrytest.Rule{{Path: layer.String(), Times: 1, Fault: registrytest.StallAfter(mid)}},
			counts: []count{{registrytest.Blob, layer, 2}}},
		{name: "layer never answers once", rules: []registrytest.Rule{{Path: layer.String(), Times: 1, Fault: registrytest.Hang()}},
			counts: []count{{registrytest.Blob, layer, 2}}},
		{name: "layer answers 500 once", rules: []registrytest.Rule{{Path: layer.String(), Times: 1, Fault: registrytest.Status(500)}},
			counts: []count{{registrytest.Blob, layer, 2}}},
		{name: "layer reset mid-body once", rules: []registrytest.Rule{{Path: layer.String(), Times: 1, Fault: registrytest.ResetAfter(mid)}},
			counts: []count{{registrytest.Blob, layer, 2}}},
		{name: "layer cut short once", rules: []registrytest.Rule{{Path: layer.String(), Times: 1, Fault: registrytest.CutAfter(mid)}},
			counts: []count{{registrytest.Blob, layer, 2}}},
		{name: "layer stalls as often as there are retries", rules: []registrytest.Rule{{Path: layer.String(), Times: netRetries, Fault: registrytest.StallAfter(mid)}},
			counts: []count{{registrytest.Blob, layer, netRetries + 1}}},

		// Slow but moving: every response drips with gaps shorter than the
		// stall timeout, each taking longer than it in total. Nothing is
		// retried.
		{name: "everything drips", rules: []registrytest.Rule{
			{Kind: registrytest.Manifest, Fault: registrytest.Drip(96, netStall/4)},
			{Path: cfg.String(), Fault: registrytest.Drip(96, netStall/4)},
			{Kind: registrytest.Blob, Fault: registrytest.Drip(8<<10, netStall/4)},
		}, counts: []count{{registrytest.Manifest, index, 1}, {registrytest.Manifest, man, 1}, {registrytest.Blob, cfg, 1}, {registrytest.Blob, layer, 1}},
			minTook: 3 * netStall},

		// Faults that persist.
		{name: "layer stalls every time", rules: []registrytest.Rule{{Path: layer.String(), Fault: registrytest.StallAfter(mid)}},
			wantErr: "fetch layer " + layer.String() + " from %s: after 3 attempts: no bytes for 300ms (stalled)", wantIs: ErrStalled,
			counts: []count{{registrytest.Blob, layer, netRetries + 1}}},
		{name: "index never answers", rules: []registrytest.Rule{{Path: index.String(), Fault: registrytest.Hang()}},
			wantErr: "fetch index " + index.String() + " from %s: after 3 attempts: no bytes for 300ms (stalled)", wantIs: ErrStalled,
			counts: []count{{registrytest.Manifest, index, netRetries + 1}}},
		{name: "manifest stalls every time", rules: []registrytest.Rule{{Path: man.String(), Fault: registrytest.StallAfter(10)}},
			wantErr: "fetch manifest " + man.String() + " from %s: after 3 attempts: no bytes for 300ms (stalled)", wantIs: ErrStalled,
			counts: []count{{registrytest.Manifest, man, netRetries + 1}}},
		{name: "config answers 503 every time", rules: []registrytest.Rule{{Path: cfg.String(), Fault: registrytest.Status(503)}},
			wantErr: "fetch config " + cfg.String() + " from %s: after 3 attempts: ", counts: []count{{registrytest.Blob, cfg, netRetries + 1}}},
		{name: "no retries: one 503 fails", retries: -1, rules: []registrytest.Rule{{Path: small.String(), Times: 1, Fault: registrytest.Status(503)}},
			wantErr: "fetch layer " + small.String() + " from %s: ", counts: []count{{registrytest.Blob, small, 1}}},
		{name: "404 is not retried", rules: []registrytest.Rule{{Path: layer.String(), Fault: registrytest.Serve("/v2/" + netRepo + "/blobs/" + digest.FromString("absent").String())}},
			wantErr: "fetch layer " + layer.String() + " from %s: ", counts: []count{{registrytest.Blob, layer, 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := registrytest.NewProxy(t, reg.URL())
			p.Add(c.rules...)
			o := netOptions(t, img, p.Host(), func(o *Options) {
				switch {
				case c.retries < 0:
					o.Registry.Retries = 0
				case c.retries > 0:
					o.Registry.Retries = c.retries
				}
			})
			start := time.Now()
			res, err := Install(context.Background(), o)
			took := time.Since(start)
			t.Logf("took %v", took.Round(time.Millisecond))
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("Install() = %v; requests: %v", err, p.Requests())
				}
				if !res.Changed || currentTarget(t, o.RuntimeDir) != "releases/"+man.Encoded() {
					t.Errorf("Install() = %+v, current -> %q; want the release active", res, currentTarget(t, o.RuntimeDir))
				}
				if took < c.minTook {
					t.Errorf("Install() took %v, want at least %v", took, c.minTook)
				}
			} else {
				want := c.wantErr
				if strings.Contains(want, "%s") {
					want = fmt.Sprintf(want, p.Host())
				}
				if err == nil || !strings.HasPrefix(err.Error(), want) || (c.wantIs != nil && !errors.Is(err, c.wantIs)) {
					t.Fatalf("Install() = %v; want an error starting %q (is %v)", err, want, c.wantIs)
				}
				if got := currentTarget(t, o.RuntimeDir); got != "" {
					t.Errorf("current -> %q after a failed install, want none", got)
				}
				assertNoPartialBlobs(t, o.RuntimeDir)
			}
			for _, n := range c.counts {
				if got := p.Count(n.kind, n.path.String()); got != n.want {
					t.Errorf("requests for %s = %d, want %d; requests: %v", n.path, got, n.want, p.Requests())
				}
			}
		})
	}
}

// eventLog records install progress events in order.
type eventLog struct {
	mu     sync.Mutex
	events []Event
}

func (l *eventLog) Event(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// TestInstallExtractsWhileFetching: a layer is applied as its blob
// arrives, not after: with the big layer dripping in, extraction reports
// progress on it before its download is done. The blob is still checked
// and stored whole.
func TestInstallExtractsWhileFetching(t *testing.T) {
	reg := testenv.StartRegistry(t)
	img := pushNetImage(t, reg.URL(), "test", "IMAGE=follow")
	p := registrytest.NewProxy(t, reg.URL())
	p.Add(registrytest.Rule{Path: img.layer.String(), Fault: registrytest.Drip(4<<10, 20*time.Millisecond)})
	var ev eventLog
	o := netOptions(t, img, p.Host(), func(o *Options) { o.Progress = &ev; o.KeepBlobs = true })
	if _, err := Install(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	big := -1
	for i, l := range img.Layers[img.plat] {
		if l.Digest == img.layer {
			big = i
		}
	}
	progressed, blobDone := -1, -1
	for i, e := range ev.events {
		if e.Index != big {
			continue
		}
		if e.Kind == EventLayerProgress && e.Done > 0 && e.Done < e.Size && progressed < 0 {
			progressed = i
		}
		if e.Kind == EventBlobDone {
			blobDone = i
		}
	}
	if progressed < 0 || blobDone < 0 || progressed > blobDone {
		t.Errorf("layer %d: first partial progress at event %d, blob done at event %d; want progress first", big, progressed, blobDone)
	}
	if !(blobCache{dir: filepath.Join(o.RuntimeDir, release.BlobsDir)}).has(img.layer, int64(len(img.Blob(img.layer)))) {
		t.Errorf("blob %s not kept whole in the cache", img.layer)
	}
	assertNoPartialBlobs(t, o.RuntimeDir)
}

// assertNoPartialBlobs checks no temporary blob is left in the cache.
func assertNoPartialBlobs(t *testing.T, runtimeDir string) {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(runtimeDir, release.BlobsDir, "sha256"))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temporary blob %s left behind", e.Name())
		}
	}
}

// TestInstallRefusesLyingRegistry: the real registry behind a proxy that
// lies. Wrong bytes for a digest, a manifest or index served for another
// digest, and a Content-Length that disagrees with the descriptor are
// refused at once, without a retry; the release active before stays active
// and no bad blob enters the cache. A Content-Length promising more than
// arrives is a truncation: retried, and refused when it persists.
func TestInstallRefusesLyingRegistry(t *testing.T) {
	reg := testenv.StartRegistry(t)
	good := pushNetImage(t, reg.URL(), "good", "IMAGE=good")
	img := pushNetImage(t, reg.URL(), "bad", "IMAGE=bad")
	plat := img.plat
	index, man, cfg, layer := img.Index, img.Manifests[plat], img.Configs[plat], img.layer
	flip := func(b []byte) []byte {
		b = append([]byte(nil), b...)
		b[len(b)/2] ^= 0xff
		return b
	}
	cases := []struct {
		name    string
		rule    registrytest.Rule
		mut     func(*Options)
		wantIs  error
		wantErr string // prefix; %s = proxy host
		request digest.Digest
		want    int // requests for it
	}{
		{name: "layer bytes do not match the digest", rule: registrytest.Rule{Path: layer.String(), Fault: registrytest.Edit(flip)},
			wantIs: ErrDigestMismatch, wantErr: "fetch layer " + layer.String() + " from %s: digest mismatch: content does not hash to", request: layer, want: 1},
		{name: "layer shorter, with a Content-Length to match", rule: registrytest.Rule{Path: layer.String(), Fault: registrytest.Edit(func(b []byte) []byte { return b[:len(b)-100] })},
			wantIs: ErrDigestMismatch, wantErr: fmt.Sprintf("fetch layer %s from %%s: digest mismatch: registry sends %d bytes (Content-Length), descriptor says %d", layer, len(img.Blob(layer))-100, len(img.Blob(layer))),
			request: layer, want: 1},
		{name: "layer longer, with a Content-Length to match", rule: registrytest.Rule{Path: layer.String(), Fault: registrytest.Edit(func(b []byte) []byte { return append(append([]byte(nil), b...), "more"...) })},
			wantIs: ErrDigestMismatch, wantErr: fmt.Sprintf("fetch layer %s from %%s: digest mismatch: registry sends %d bytes (Content-Length)", layer, len(img.Blob(layer))+4),
			request: layer, want: 1},
		{name: "config bytes do not match the digest", rule: registrytest.Rule{Path: cfg.String(), Fault: registrytest.Edit(flip)},
			wantIs: ErrDigestMismatch, wantErr: "config: digest mismatch", request: cfg, want: 1},
		{name: "manifest served for another digest", rule: registrytest.Rule{Path: man.String(), Fault: registrytest.Serve(manifestPath(img.Manifests["linux/"+otherArch()]))},
			wantIs: ErrDigestMismatch, wantErr: "manifest: digest mismatch", request: man, want: 1},
		{name: "index served for another digest", rule: registrytest.Rule{Path: index.String(), Fault: registrytest.Serve(manifestPath(man))},
			wantIs: ErrDigestMismatch, wantErr: "index: digest mismatch", request: index, want: 1},
		{name: "index bytes do not match the digest", rule: registrytest.Rule{Path: index.String(), Fault: registrytest.Edit(func(b []byte) []byte { return append(append([]byte(nil), b...), ' ') })},
			wantIs: ErrDigestMismatch, wantErr: "index: digest mismatch", request: index, want: 1},
		// The library resumes a cut body once by itself, with a Range
		// request (here cut again), after a 1s pause the stall watchdog
		// would take for a stall: disable it to see the cause.
		{name: "Content-Length promises more than arrives", rule: registrytest.Rule{Path: layer.String(), Fault: registrytest.CutAfter(8 << 10)},
			mut:    func(o *Options) { o.Registry.StallTimeout, o.Registry.Retries = 0, 0 },
			wantIs: io.ErrUnexpectedEOF, wantErr: "fetch layer " + layer.String() + " from %s: unexpected EOF", request: layer, want: 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := registrytest.NewProxy(t, reg.URL())
			goodOpts := netOptions(t, good, p.Host())
			if _, err := Install(context.Background(), goodOpts); err != nil {
				t.Fatal(err)
			}
			before := currentTarget(t, goodOpts.RuntimeDir)
			seen := p.Count(registrytest.Any, c.request.String()) // the images share a layer
			p.Add(c.rule)
			// ExtractAll: the shared layer is read again, not reused.
			o := netOptions(t, img, p.Host(), func(o *Options) { o.RuntimeDir, o.ExtractAll = goodOpts.RuntimeDir, true }, func(o *Options) {
				if c.mut != nil {
					c.mut(o)
				}
			})
			_, err := Install(context.Background(), o)
			want := c.wantErr
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, p.Host())
			}
			if err == nil || !errors.Is(err, c.wantIs) || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("Install() = %v; want %v starting %q", err, c.wantIs, want)
			}
			if got := currentTarget(t, o.RuntimeDir); got != before {
				t.Errorf("current -> %q after a refused install, want %q", got, before)
			}
			if got := p.Count(registrytest.Any, c.request.String()) - seen; got != c.want {
				t.Errorf("requests for %s = %d, want %d; requests: %v", c.request, got, c.want, p.Requests())
			}
			if _, err := os.Stat(filepath.Join(o.RuntimeDir, release.BlobsDir, "sha256", layer.Encoded())); err == nil {
				b, _ := os.ReadFile(filepath.Join(o.RuntimeDir, release.BlobsDir, "sha256", layer.Encoded()))
				if digest.FromBytes(b) != layer {
					t.Errorf("the cache holds wrong bytes under %s", layer)
				}
			}
			assertNoPartialBlobs(t, o.RuntimeDir)
			if ents, _ := os.ReadDir(filepath.Join(o.RuntimeDir, "staging")); len(ents) != 0 {
				t.Errorf("staging holds %d entries after a refused install", len(ents))
			}
		})
	}
}

// startAuthRegistry pushes the network test image to an open registry,
// then serves the same storage again with authentication per opts (opts
// may need the new registry's nothing: tokens and htpasswd name no host).
func startAuthRegistry(t *testing.T, opts func(dir string) testenv.Options) (*testenv.Registry, *netImage) {
	t.Helper()
	dir := t.TempDir()
	open := testenv.StartRegistryWith(t, dir, testenv.Options{})
	img := pushNetImage(t, open.URL(), "test", "IMAGE=auth")
	if err := open.Stop(); err != nil {
		t.Fatal(err)
	}
	return testenv.StartRegistryWith(t, dir, opts(dir)), img
}

// TestInstallBearerTokenAnonymous: a registry with token authentication, as
// ghcr.io: nothing is served without a token, and Install, without
// credentials, follows the WWW-Authenticate challenge to the issuer for an
// anonymous pull token.
func TestInstallBearerTokenAnonymous(t *testing.T) {
	iss := registrytest.NewTokenIssuer(t)
	reg, img := startAuthRegistry(t, func(string) testenv.Options { return testenv.Options{Token: iss.Auth()} })

	resp, err := http.Get(reg.URL() + manifestPath(img.Index))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ch := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(ch, "Bearer realm=") {
		t.Fatalf("GET index without a token = %s %q, want 401 with a Bearer challenge", resp.Status, ch)
	}

	o := netOptions(t, img, reg.Host())
	if _, err := Install(context.Background(), o); err != nil {
		t.Fatalf("Install() = %v", err)
	}
	if got := currentTarget(t, o.RuntimeDir); got != "releases/"+img.Manifests[img.plat].Encoded() {
		t.Errorf("current -> %q, want the release", got)
	}
	reqs := iss.Requests()
	if len(reqs) == 0 {
		t.Fatal("the issuer got no token request")
	}
	for _, r := range reqs {
		if r.Account != "" || r.Basic {
			t.Errorf("token request %+v carries credentials, want anonymous", r)
		}
		if r.Service != registrytest.TokenService || !slices.Contains(r.Granted, "repository:"+netRepo+":pull") {
			t.Errorf("token request %+v, want service %s and pull on %s", r, registrytest.TokenService, netRepo)
		}
	}
}

// TestInstallAuthFile: a registry with htpasswd authentication; Install
// pulls with the credentials of RegistryOptions.AuthFile, and without them,
// or with wrong ones, fails at the index without retrying.
func TestInstallAuthFile(t *testing.T) {
	line, err := registrytest.HtpasswdLine("hermes", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	reg, img := startAuthRegistry(t, func(dir string) testenv.Options {
		path := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return testenv.Options{Htpasswd: path}
	})
	authDir := t.TempDir()
	authFile := func(name, password string) string {
		path := filepath.Join(authDir, name)
		if err := registrytest.WriteAuthFile(path, reg.Host(), "hermes", password); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cases := []struct {
		name     string
		authFile string
		wantErr  string // "" for success
	}{
		{"credentials from the auth file", authFile("good.json", "s3cret"), ""},
		{"no auth file", "", "fetch index " + img.Index.String() + " from " + reg.Host() + ": authentication required"},
		{"wrong password", authFile("bad.json", "guess"), "fetch index " + img.Index.String() + " from " + reg.Host() + ": authentication required"},
		{"auth file missing", filepath.Join(authDir, "absent.json"), "registry auth file: stat " + filepath.Join(authDir, "absent.json")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := netOptions(t, img, reg.Host(), func(o *Options) { o.Registry.AuthFile = c.authFile })
			start := time.Now()
			_, err := Install(context.Background(), o)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("Install() = %v", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), c.wantErr) || strings.Contains(err.Error(), "attempts") {
				t.Fatalf("Install() = %v; want an error starting %q, not retried", err, c.wantErr)
			}
			if took := time.Since(start); took > netStall {
				t.Errorf("Install() took %v to fail, want no retry", took)
			}
		})
	}
}

// TestInstallInterrupted: cancelling Install's context ends it promptly
// whatever the network is doing, waiting on a silent registry or waiting
// out a retry backoff, and the error says it was cancelled, not stalled.
func TestInstallInterrupted(t *testing.T) {
	reg := testenv.StartRegistry(t)
	img := pushNetImage(t, reg.URL(), "test", "IMAGE=interrupted")
	cases := []struct {
		name string
		rule registrytest.Rule
		mut  func(*Options)
	}{
		{"silent registry, no watchdog", registrytest.Rule{Path: img.layer.String(), Fault: registrytest.Hang()},
			func(o *Options) { o.Registry.StallTimeout = 0 }},
		{"long backoff", registrytest.Rule{Path: img.layer.String(), Fault: registrytest.Status(503)},
			func(o *Options) { o.Registry.Backoff = time.Hour }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := registrytest.NewProxy(t, reg.URL())
			p.Add(c.rule)
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				for p.Count(registrytest.Blob, img.layer.String()) == 0 {
					time.Sleep(5 * time.Millisecond)
				}
				time.Sleep(50 * time.Millisecond)
				cancel()
			}()
			o := netOptions(t, img, p.Host(), c.mut)
			done := installAsync(ctx, o)
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) || errors.Is(err, ErrStalled) {
					t.Errorf("Install() = %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Install() still running 10s after its context was cancelled")
			}
			if got := currentTarget(t, o.RuntimeDir); got != "" {
				t.Errorf("current -> %q after an interrupted install, want none", got)
			}
		})
	}
}

// installAsync runs Install on a goroutine; its error arrives on the
// returned channel, which has room for one more send.
func installAsync(ctx context.Context, o Options) chan error {
	done := make(chan error, 1)
	go func() {
		_, err := Install(ctx, o)
		done <- err
	}()
	return done
}

// progressFn adapts a function to Progress.
type progressFn func(Event)

func (f progressFn) Event(e Event) { f(e) }

// TestInstallInterruptedAtEachStage: an install whose context ends (hbx
// got SIGINT) while a layer is applied, or after the last layer but before
// validation, stops there with context.Canceled, never reports the release
// as damaged, and activates nothing; the next run converges.
func TestInstallInterruptedAtEachStage(t *testing.T) {
	reg := testenv.StartRegistry(t)
	img := pushNetImage(t, reg.URL(), "test", "IMAGE=sigint")
	layers := len(img.Layers[img.plat])
	cases := []struct {
		name string
		at   func(Event) bool
	}{
		{"while layer 1 is applied", func(e Event) bool { return e.Kind == EventLayerStart && e.Index == 1 }},
		{"after the last layer", func(e Event) bool { return e.Kind == EventLayerDone && e.Index == layers-1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			o := netOptions(t, img, reg.Host(), func(o *Options) {
				o.Progress = progressFn(func(e Event) {
					if c.at(e) {
						cancel()
					}
				})
			})
			_, err := Install(ctx, o)
			if !errors.Is(err, context.Canceled) || errors.Is(err, release.ErrCorrupt) {
				t.Fatalf("Install() = %v; want context.Canceled, not a damaged release", err)
			}
			if got := currentTarget(t, o.RuntimeDir); got != "" {
				t.Errorf("current -> %q after an interrupted install, want none", got)
			}
			o.Progress = nil
			if _, err := Install(context.Background(), o); err != nil {
				t.Fatalf("Install() after the interrupted one = %v", err)
			}
		})
	}
}

// TestFailedInstallLeavesOnlyTheLock: a cold install that fails (here: no
// registry answers) leaves the runtime directory with its lock file and
// nothing else: no scratch configuration, no empty staging directory.
func TestFailedInstallLeavesOnlyTheLock(t *testing.T) {
	reg := testenv.StartRegistry(t)
	img := pushNetImage(t, reg.URL(), "test", "IMAGE=leftovers")
	o := netOptions(t, img, "127.0.0.1:1", func(o *Options) { o.Registry.Retries = 0 })
	if _, err := Install(context.Background(), o); err == nil {
		t.Fatal("Install() from a port nobody listens on succeeded")
	}
	ents, err := os.ReadDir(o.RuntimeDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != release.LockFile {
		t.Errorf("runtime directory after a failed install = %q, want only %q", names, release.LockFile)
	}
}
