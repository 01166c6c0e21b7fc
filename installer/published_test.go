package installer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/registrytest"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/release"
)

// TestInstallReusesPublished: a complete release left under releases/
// (here staged with StageOnly, as hbx upgrade does) that is neither current
// nor previous survives a failed install of another image, and installing
// its image makes it active in place with no registry request (the
// new-user pass found the failed install deleting it first, with its kept
// blobs, then failing on the unreachable registry).
func TestInstallReusesPublished(t *testing.T) {
	reg := testenv.StartRegistry(t)
	a := pushNetImage(t, reg.URL(), "a", "IMAGE=a")
	b := pushNetImage(t, reg.URL(), "b", "IMAGE=b")
	c := pushNetImage(t, reg.URL(), "c", "IMAGE=c")
	d := pushNetImage(t, reg.URL(), "d", "IMAGE=d")
	p := registrytest.NewProxy(t, reg.URL())
	rt := filepath.Join(t.TempDir(), "runtime")
	opts := func(img *netImage, mut ...func(*Options)) Options {
		return netOptions(t, img, p.Host(), append([]func(*Options){func(o *Options) { o.RuntimeDir = rt; o.KeepBlobs = true }}, mut...)...)
	}
	for _, img := range []*netImage{a, b} {
		if _, err := Install(context.Background(), opts(img)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Install(context.Background(), opts(c, func(o *Options) { o.StageOnly = true })); err != nil {
		t.Fatal(err)
	}
	cDir := filepath.Join(rt, release.ReleasesDir, c.Manifests[c.plat].Encoded())
	if _, err := release.Open(cDir); err != nil {
		t.Fatalf("staged release: %v", err)
	}
	p.Close() // the registry is gone from here on

	// A cold install that fails (no registry) removes no published release.
	if _, err := Install(context.Background(), opts(d)); err == nil {
		t.Fatal("Install(d) with the registry gone = nil error")
	}
	if _, err := release.Open(cDir); err != nil {
		t.Errorf("after a failed install the published release c is gone: %v", err)
	}
	cIndex := filepath.Join(rt, release.BlobsDir, "sha256", c.Index.Encoded())
	if _, err := os.Stat(cIndex); err != nil {
		t.Errorf("after a failed install c's kept index blob is gone: %v", err)
	}

	// Installing c reuses it in place: no registry needed.
	res, err := Install(context.Background(), opts(c))
	if err != nil {
		t.Fatalf("Install(c) with c published and the registry gone = %v, want it reused", err)
	}
	if !res.Changed || res.Fetched != 0 || !strings.Contains(res.Reason, "reused the published release in place") {
		t.Errorf("Install(c) = %+v, want changed, nothing fetched, reused the published release", res)
	}
	link := func(name string) string {
		s, _ := os.Readlink(filepath.Join(rt, name))
		return filepath.Base(s)
	}
	if got, want := link(release.CurrentLink), c.Manifests[c.plat].Encoded(); got != want {
		t.Errorf("current = %s, want %s", got, want)
	}
	if got, want := link(release.PreviousLink), b.Manifests[b.plat].Encoded(); got != want {
		t.Errorf("previous = %s, want %s (the release current named)", got, want)
	}
}
