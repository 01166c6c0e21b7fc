package installer

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/hermesbox/hbx/release"
)

// TestReactivate: a rollback's release is kept when current holds it,
// activated in place when previous holds it (previous and current swap),
// and left to an install (held false, nothing changed) when neither holds
// it: another manifest, another platform, another image, no runtime
// directory. A lock it cannot take is its error, with nothing changed.
func TestReactivate(t *testing.T) {
	e := newEnv(t)
	a := e.reg.publish(t, "a", goodParts(hostPlat))
	bParts := goodParts(hostPlat)
	bParts.config.Env = append(bParts.config.Env, "IMAGE=b")
	b := e.reg.publish(t, "b", bParts)
	for _, p := range []published{a, b} {
		if _, err := Install(context.Background(), e.opts(p)); err != nil {
			t.Fatal(err)
		}
	}
	plat := "linux/" + runtime.GOARCH
	target := func(p published) release.Target {
		return release.Target{Image: p.ref, IndexDigest: p.index, Platform: plat, ManifestDigest: p.manifests[plat]}
	}
	other := target(a)
	other.ManifestDigest = b.manifests[plat]
	onOther := target(a)
	onOther.Platform, onOther.ManifestDigest = "linux/"+otherArch(), ""
	unknown := target(a)
	unknown.IndexDigest = b.manifests[plat]

	// A lock held elsewhere: the activation fails and nothing changes.
	lk, err := release.LockExisting(context.Background(), e.runtime, "test", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if held, changed, err := Reactivate(context.Background(), e.runtime, target(a), 0); err == nil || !held || changed {
		t.Errorf("Reactivate(previous) with the lock held = %v, %v, %v; want held, not changed, an error", held, changed, err)
	}
	if err := lk.Unlock(); err != nil {
		t.Fatal(err)
	}
	if got := filepath.Base(currentTarget(t, e.runtime)); got != b.manifests[plat].Encoded() {
		t.Fatalf("after a failed activation current = %s, want b's %s", got, b.manifests[plat].Encoded())
	}

	for _, tc := range []struct {
		name          string
		runtimeDir    string
		want          release.Target
		held, changed bool
		current       published
	}{
		{"current", e.runtime, target(b), true, false, b},
		{"previous", e.runtime, target(a), true, true, a},
		{"previous again: now current", e.runtime, target(a), true, false, a},
		{"another manifest", e.runtime, other, false, false, a},
		{"another platform", e.runtime, onOther, false, false, a},
		{"another image", e.runtime, unknown, false, false, a},
		{"no runtime directory", filepath.Join(t.TempDir(), "none"), target(a), false, false, a},
	} {
		held, changed, err := Reactivate(context.Background(), tc.runtimeDir, tc.want, 0)
		if err != nil || held != tc.held || changed != tc.changed {
			t.Errorf("%s: Reactivate = %v, %v, %v; want %v, %v, nil", tc.name, held, changed, err, tc.held, tc.changed)
		}
		if got := filepath.Base(currentTarget(t, e.runtime)); got != tc.current.manifests[plat].Encoded() {
			t.Errorf("%s: current = %s, want %s", tc.name, got, tc.current.manifests[plat].Encoded())
		}
	}
}
