package installer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/registrytest"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/release"
)

// TestInstallDeadline: a registry that trickles the big layer keeps an
// install alive past any stall timeout; Options.Timeout stops it with
// ErrTimeout, nothing activated and what is kept said, while the same
// trickle fits in Timeout plus the image's size at MinRate.
func TestInstallDeadline(t *testing.T) {
	reg := testenv.StartRegistry(t)
	img := pushNetImage(t, reg.URL(), "test", "IMAGE=deadline")
	// 48 KiB at 1 KiB every 100ms: about 4.8s, each gap well under the
	// 300ms stall timeout, so a loaded machine still reaches the last
	// layer well within the 2s deadline of "timeout passes".
	drip := registrytest.Rule{Path: img.layer.String(), Fault: registrytest.Drip(1<<10, 100*time.Millisecond)}

	t.Run("timeout passes", func(t *testing.T) {
		t.Parallel()
		p := registrytest.NewProxy(t, reg.URL())
		p.Add(drip)
		o := netOptions(t, img, p.Host(), func(o *Options) { o.Timeout = 2 * time.Second; o.KeepBlobs = true })
		start := time.Now()
		_, err := Install(context.Background(), o)
		took := time.Since(start)
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Install() = %v, want ErrTimeout", err)
		}
		t.Logf("took %s: %v", took.Round(time.Millisecond), err)
		if took < 2*time.Second || took > 15*time.Second {
			t.Errorf("Install() returned after %s, want about the 2s timeout", took)
		}
		for _, want := range []string{"install deadline passed: no release after 2s at layer 3/3 sha256:", "nothing was activated (no release is active)", "complete blobs (", "kept in " + filepath.Join(o.RuntimeDir, release.BlobsDir)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Install() = %q, want it to say %q", err, want)
			}
		}
		if _, err := release.Current(o.RuntimeDir); !errors.Is(err, release.ErrNoRelease) {
			t.Errorf("release.Current() after the timeout = %v, want ErrNoRelease", err)
		}
		assertNoPartialBlobs(t, o.RuntimeDir)
	})
	t.Run("scaled by size", func(t *testing.T) {
		t.Parallel()
		p := registrytest.NewProxy(t, reg.URL())
		p.Add(drip)
		// 400ms + ~55 KB at 8 KB/s: about 7s, room for the 4.8s trickle.
		o := netOptions(t, img, p.Host(), func(o *Options) { o.Timeout = 400 * time.Millisecond; o.MinRate = 8 << 10 })
		if _, err := Install(context.Background(), o); err != nil {
			t.Fatalf("Install() = %v, want success within the scaled deadline", err)
		}
	})
}

// TestInstallInterruptedSaysWhatIsKept: cancelling an install mid-layer returns
// ErrInterrupted (and context.Canceled) saying the active release stays
// and which complete blobs are kept; current is untouched.
func TestInstallInterruptedSaysWhatIsKept(t *testing.T) {
	reg := testenv.StartRegistry(t)
	a := pushNetImage(t, reg.URL(), "a", "IMAGE=a")
	b := pushNetImage(t, reg.URL(), "b", "IMAGE=b")
	o := netOptions(t, a, reg.Host())
	if _, err := Install(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Readlink(filepath.Join(o.RuntimeDir, release.CurrentLink))

	p := registrytest.NewProxy(t, reg.URL())
	p.Add(registrytest.Rule{Path: b.layer.String(), Fault: registrytest.Drip(1<<10, 50*time.Millisecond)})
	// ExtractAll: b differs from a only in its config, so every layer
	// would come from a's release and none be fetched.
	ob := netOptions(t, b, p.Host(), func(x *Options) { x.RuntimeDir, x.ExtractAll = o.RuntimeDir, true })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ob.Progress = progressFn(func(e Event) {
		if e.Kind == EventLayerProgress && e.Digest == b.layer && e.Done > 0 {
			cancel()
		}
	})
	_, err := Install(ctx, ob)
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Install() = %v, want ErrInterrupted", err)
	}
	t.Logf("Install() = %v", err)
	for _, want := range []string{"interrupted at layer 3/3 " + b.layer.String() + ": nothing was activated (" + a.ref(reg.Host()) + " stays active); ", "complete blobs (", "are kept in "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Install() = %q, want it to say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "context canceled") {
		t.Errorf("Install() = %q, says the raw context error", err)
	}
	if after, _ := os.Readlink(filepath.Join(o.RuntimeDir, release.CurrentLink)); after != before {
		t.Errorf("current = %q after the interrupt, want %q", after, before)
	}
}

// TestInstallReusesPrevious: installing the image previous names again
// swaps current and previous without a registry request; a previous that
// fails the warm checks (or, with Verify, the re-hash) is installed anew.
func TestInstallReusesPrevious(t *testing.T) {
	reg := testenv.StartRegistry(t)
	a := pushNetImage(t, reg.URL(), "a", "IMAGE=a")
	b := pushNetImage(t, reg.URL(), "b", "IMAGE=b")
	p := registrytest.NewProxy(t, reg.URL())
	rt := filepath.Join(t.TempDir(), "runtime")
	opts := func(img *netImage, verify bool) Options {
		return netOptions(t, img, p.Host(), func(o *Options) { o.RuntimeDir = rt; o.Verify = verify })
	}
	link := func(name string) string {
		t.Helper()
		s, err := os.Readlink(filepath.Join(rt, name))
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Base(s)
	}
	for _, img := range []*netImage{a, b} {
		if _, err := Install(context.Background(), opts(img, false)); err != nil {
			t.Fatal(err)
		}
	}
	aHex, bHex := a.Manifests[a.plat].Encoded(), b.Manifests[b.plat].Encoded()

	for i, img := range []*netImage{a, b} {
		n := len(p.Requests())
		res, err := Install(context.Background(), opts(img, i == 1))
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Requests()[n:]; len(got) != 0 {
			t.Errorf("install %d of the previous release made %d registry requests, want none: %v", i, len(got), got)
		}
		if !res.Changed || res.Fetched != 0 || !strings.Contains(res.Reason, "reused the previous release in place") {
			t.Errorf("install %d: Result = %+v, want changed, nothing fetched, reused", i, res)
		}
		want, other := aHex, bHex
		if img == b {
			want, other = bHex, aHex
		}
		if link(release.CurrentLink) != want || link(release.PreviousLink) != other {
			t.Errorf("install %d: current %s previous %s, want %s and %s", i, link(release.CurrentLink), link(release.PreviousLink), want, other)
		}
	}

	// previous (a) with a changed file: found by Verify, fetched again.
	prev, err := release.Link(rt, release.PreviousLink)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prev.Rootfs(), "etc/old.conf"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := len(p.Requests())
	res, err := Install(context.Background(), opts(a, true))
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched == 0 || len(p.Requests()) == n {
		t.Errorf("Verify install of a changed previous release: Result %+v, %d requests; want it fetched again", res, len(p.Requests())-n)
	}
	if link(release.CurrentLink) != aHex {
		t.Errorf("current %s, want %s", link(release.CurrentLink), aHex)
	}
}

// TestDeadlineScaleSaturates: install.min_rate 1 (byte/s) with a 10 GB
// image, or a very long install.timeout, makes base + size/rate larger
// than a time.Duration holds; the sum overflowed to a negative limit and
// the install failed at once with "no release after -2562047h...".
func TestDeadlineScaleSaturates(t *testing.T) {
	for _, tc := range []struct {
		base time.Duration
		rate int64
		size int64
	}{
		{10 * time.Minute, 1, 10 << 30},
		{2500000 * time.Hour, 1, 1 << 30},
	} {
		ctx, d, stop := withDeadline(context.Background(), tc.base, tc.rate)
		d.scale(tc.size)
		if d.limit < tc.base {
			t.Errorf("base %s, %d B at %d B/s: limit %s, want at least the base", tc.base, tc.size, tc.rate, d.limit)
		}
		select {
		case <-ctx.Done():
			t.Errorf("base %s, %d B at %d B/s: the deadline fired at once (%v)", tc.base, tc.size, tc.rate, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
		stop()
	}
}
