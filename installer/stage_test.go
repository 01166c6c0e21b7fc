package installer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
)

// TestStageThenActivate: StageOnly publishes the new release without
// moving current or previous; Activate switches to it (previous := the
// old current), and activating previous swaps them back.
func TestStageThenActivate(t *testing.T) {
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", goodParts(hostPlat))
	if _, err := Install(context.Background(), e.opts(p1)); err != nil {
		t.Fatal(err)
	}
	first := currentTarget(t, e.runtime)
	parts := goodParts(hostPlat)
	parts.config.Env = append(parts.config.Env, "VERSION=2")
	p2 := e.reg.publish(t, "executor", parts)
	res, err := Install(context.Background(), e.opts(p2, func(o *Options) { o.StageOnly = true }))
	if err != nil {
		t.Fatalf("Install(StageOnly) = %v", err)
	}
	if got := currentTarget(t, e.runtime); got != first {
		t.Fatalf("current after StageOnly = %q, want %q unchanged", got, first)
	}
	if _, err := os.Lstat(filepath.Join(e.runtime, release.PreviousLink)); err == nil {
		t.Errorf("StageOnly set previous")
	}
	staged := res.Release.Meta.ManifestDigest
	if res.Release.Meta.IndexDigest != p2.index || res.Release.Dir != filepath.Join(e.runtime, release.ReleasesDir, staged.Encoded()) {
		t.Fatalf("Install(StageOnly).Release = %+v, want the staged p2 release", res.Release)
	}
	if err := Activate(context.Background(), e.runtime, staged, 0); err != nil {
		t.Fatalf("Activate(staged) = %v", err)
	}
	cur, err := release.Current(e.runtime)
	if err != nil || cur.Meta.IndexDigest != p2.index {
		t.Fatalf("current after Activate = %v, %v; want p2", cur, err)
	}
	prev, err := release.Link(e.runtime, release.PreviousLink)
	if err != nil || prev.Meta.IndexDigest != p1.index {
		t.Fatalf("previous after Activate = %v, %v; want p1", prev, err)
	}
	if err := Activate(context.Background(), e.runtime, prev.Meta.ManifestDigest, 0); err != nil {
		t.Fatalf("Activate(previous) = %v", err)
	}
	if got := currentTarget(t, e.runtime); got != first {
		t.Errorf("current after activating previous = %q, want %q", got, first)
	}
	if prev, _ := release.Link(e.runtime, release.PreviousLink); prev == nil || prev.Meta.IndexDigest != p2.index {
		t.Errorf("previous after the swap back is not p2")
	}
	if err := Activate(context.Background(), e.runtime, digest.FromString("nothing"), 0); !errors.Is(err, ErrNotStaged) {
		t.Errorf("Activate(unknown) = %v, want ErrNotStaged", err)
	}
}

// TestActivateMissingRuntimeDir: Activate over a runtime directory that
// does not exist fails and creates nothing (bad input changes nothing on
// disk): it takes the lock of an existing runtime directory, never makes
// one, as before release.LockRuntime.
func TestActivateMissingRuntimeDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "no", "runtime")
	m := digest.FromString("a manifest")
	if err := Activate(context.Background(), dir, m, 0); err == nil {
		t.Fatalf("Activate(%s) = nil, want an error", dir)
	}
	if _, err := os.Lstat(filepath.Dir(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Activate over a missing runtime directory: %s exists (%v), want nothing created", filepath.Dir(dir), err)
	}
}
