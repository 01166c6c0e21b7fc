package installer

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/release"
)

func resolveOpts(t *testing.T, ref, plat, runtimeDir string) ResolveOptions {
	t.Helper()
	r, err := release.ParseTagRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePlatform(plat)
	if err != nil {
		t.Fatal(err)
	}
	return ResolveOptions{Ref: r, Platform: p, RuntimeDir: runtimeDir,
		Registry: RegistryOptions{InsecureHosts: []string{"127.0.0.1"}, Retries: 1, Backoff: 10 * time.Millisecond}}
}

// TestResolveTag against the real registry: a tag naming an index gives
// the pinned reference, the platform's manifest and the layers with the
// ones the blob store holds marked reusable; a tag naming a single
// manifest says so; a digest given that the tag does not name is
// ErrDigestMismatch; an unknown tag, a platform the index lacks and an
// unreachable registry are errors naming what failed.
func TestResolveTag(t *testing.T) {
	reg := testenv.StartRegistry(t)
	img := pushNetImage(t, reg.URL(), "v1", "A=1")
	plat := "linux/" + runtime.GOARCH
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := img.PushSingle(ctx, reg.URL(), netRepo, "single", plat); err != nil {
		t.Fatal(err)
	}
	name := reg.Host() + "/" + netRepo

	// Two of the three layers in the blob store (one of the wrong size:
	// not reusable).
	rd := t.TempDir()
	layers := img.Layers[plat]
	for i, l := range layers[:2] {
		b := img.Blob(l.Digest)
		if i == 1 {
			b = b[:len(b)-1]
		}
		p := filepath.Join(rd, release.BlobsDir, "sha256", l.Digest.Encoded())
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := ResolveTag(ctx, resolveOpts(t, name+":v1", plat, rd))
	if err != nil {
		t.Fatalf("ResolveTag(v1) = %v", err)
	}
	if res.Pinned() != name+":v1@"+img.Index.String() || res.Single || res.Manifest != img.Manifests[plat] || res.Config != img.Configs[plat] || res.Check() != nil {
		t.Errorf("ResolveTag(v1) = %+v (pinned %s, check %v), want index %s, manifest %s", res, res.Pinned(), res.Check(), img.Index, img.Manifests[plat])
	}
	fetch, reuse, fetchBytes, reuseBytes := res.Plan()
	if len(res.Layers) != 3 || !res.Layers[0].Reusable || res.Layers[1].Reusable || res.Layers[2].Reusable ||
		fetch != 2 || reuse != 1 || reuseBytes != layers[0].Size || fetchBytes != layers[1].Size+layers[2].Size {
		t.Errorf("ResolveTag(v1) layers = %+v, plan %d %d %d %d; want layer 0 reusable only", res.Layers, fetch, reuse, fetchBytes, reuseBytes)
	}

	single, err := ResolveTag(ctx, resolveOpts(t, name+":single", plat, ""))
	if err != nil || !single.Single || single.Index != img.Manifests[plat] || single.Manifest != single.Index {
		t.Errorf("ResolveTag(single) = %+v, %v; want the single manifest %s", single, err, img.Manifests[plat])
	}

	moved, err := ResolveTag(ctx, resolveOpts(t, name+":single@"+img.Index.String(), plat, ""))
	if err != nil {
		t.Fatalf("ResolveTag(single@index) = %v", err)
	}
	if err := moved.Check(); !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), "names "+img.Manifests[plat].String()+" now, not the given "+img.Index.String()) {
		t.Errorf("Check() of a moved tag = %v, want ErrDigestMismatch naming both digests", err)
	}

	if _, err := ResolveTag(ctx, resolveOpts(t, name+":nope", plat, "")); err == nil || !strings.Contains(err.Error(), "nope") || !strings.Contains(err.Error(), "manifest unknown") {
		t.Errorf("ResolveTag(unknown tag) = %v, want the tag and manifest unknown", err)
	}
	if _, err := ResolveTag(ctx, resolveOpts(t, name+":v1", "linux/s390x", "")); !errors.Is(err, ErrPlatform) {
		t.Errorf("ResolveTag(linux/s390x) = %v, want ErrPlatform", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	if _, err := ResolveTag(ctx, resolveOpts(t, dead+"/x:v1", plat, "")); err == nil || !strings.Contains(err.Error(), dead) {
		t.Errorf("ResolveTag(unreachable registry) = %v, want an error naming %s", err, dead)
	}
}
