package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
	"github.com/hermesbox/hbx/release"
)

// TestRandomKillReusingInstallE2E kills `hbx install` of 2.0.0 over an
// active 1.0.0 whose base layers' state is kept (so the install links
// that state in and applies only 2.0.0's own layer) with SIGKILL at
// random times (HBXTEST_KILLS, 20 by default) across the length of an
// uninterrupted one, and, with bin/hbx-e2e, at the kill points of the
// reuse (the state linked in; a state about to be published). Each time
// current names 1.0.0 or a complete 2.0.0, the next install converges on
// 2.0.0, both releases verify against their files.json (1.0.0's tree,
// sharing its inodes, is left as it was), and nothing stale remains.
func TestRandomKillReusingInstallE2E(t *testing.T) {
	requireE2E(t)
	requireKillPoints(t)
	reg, refs, manifests := pushVersions(t)
	plat := platform(t)
	tmpl := newBox(t, reg, refs["v1"], nil, "")
	if r := tmpl.hbx("install"); r.code != 0 {
		t.Fatalf("install 1.0.0: %s", r.stderr)
	}
	if ents, err := os.ReadDir(filepath.Join(tmpl.runtimeDir, release.LayersDir)); err != nil || len(ents) == 0 {
		t.Fatalf("1.0.0's install kept no layer state: %v, %v", ents, err)
	}
	old, want := "releases/"+manifests["v1"], "releases/"+manifests["v2"]
	fresh := func() *box {
		b := newBox(t, reg, refs["v2"], map[string]string{plat: "sha256:" + manifests["v2"]}, "")
		os.MkdirAll(filepath.Dir(b.runtimeDir), 0o755)
		if out, err := exec.Command("cp", "-al", tmpl.runtimeDir, b.runtimeDir).CombinedOutput(); err != nil {
			t.Fatalf("cp -al: %v %s", err, out)
		}
		return b
	}
	b := fresh()
	r := b.hbx("install")
	if r.code != 0 || !strings.Contains(r.stderr+r.stdout, "extracted layers reused") {
		t.Fatalf("uninterrupted install of 2.0.0 = %d, want 0 and the reuse said:\n%s%s", r.code, r.stdout, r.stderr)
	}
	span := r.took
	checkReuseConverges(t, b, "uninterrupted", old, want)
	n := killTrials()
	trials, finished := 0, 0
	for i := 0; trials-finished < n && trials < 3*n; i++ {
		trials++
		b := fresh()
		delay, _, fin := killRandomly(t, b, &span, "install")
		if fin {
			finished++
		}
		checkReuseConverges(t, b, "kill "+strconv.Itoa(i)+" after "+delay.Round(time.Millisecond).String(), old, want)
	}
	t.Logf("hbx install reusing layers: %d trials, %d killed with kill -9 at random times over %s, all converged unless reported", trials, trials-finished, span.Round(time.Millisecond))
	if trials-finished < n {
		t.Errorf("only %d of %d trials were killed before they finished", trials-finished, trials)
	}
	for _, at := range []string{killpoint.LayersSeeded, killpoint.LayerStatePublish} {
		b := fresh()
		if at == killpoint.LayerStatePublish {
			// A state is published only when this install made it: none kept yet.
			os.RemoveAll(filepath.Join(b.runtimeDir, release.LayersDir))
		}
		if r := b.hbxEnv([]string{"HBX_CONFIG=" + b.config, killpoint.Env + "=" + at}, "install"); r.code != -1 {
			t.Fatalf("hbx install with %s=%s = %d, want killed\n%s", killpoint.Env, at, r.code, r.stderr)
		}
		checkReuseConverges(t, b, "killed at "+at, old, want)
	}
}

// checkReuseConverges checks b's runtime directory after a killed (or
// finished) install of 2.0.0 over 1.0.0: current names old or a
// complete want; the next install ends on want; both releases verify;
// nothing stale remains.
func checkReuseConverges(t *testing.T, b *box, what, old, want string) {
	t.Helper()
	if cur := b.current(); cur != old && cur != want {
		t.Fatalf("%s: current -> %q, want %q or %q", what, cur, old, want)
	}
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("%s: next install = %d: %s", what, r.code, r.stderr)
	}
	if cur := b.current(); cur != want {
		t.Fatalf("%s: after the next install current -> %q, want %q", what, cur, want)
	}
	for _, rel := range []string{old, want} {
		inst, err := release.Open(filepath.Join(b.runtimeDir, rel))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		l, err := inst.OpenFiles()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		why, err := release.Verify(inst.Rootfs(), l)
		l.Close()
		if err != nil || why != "" {
			t.Fatalf("%s: %s does not verify: %q, %v", what, rel, why, err)
		}
	}
	if stale := staleEntries(t, b.runtimeDir); len(stale) > 0 {
		t.Fatalf("%s: stale paths remain after convergence: %q", what, stale)
	}
}

// pushVersions pushes the test image's 1.0.0 and 2.0.0 (same base
// layers, another top layer) to a fresh registry: their pinned refs and
// this platform's manifest hex, by tag v1 and v2.
func pushVersions(t *testing.T) (*testenv.Registry, map[string]string, map[string]string) {
	t.Helper()
	img1 := testImage(t)
	tarballs, err := testimage.BunTarballs(testenv.RepoRoot(t))
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	img2, err := testimage.BuildLayout(t.TempDir(), testimage.Options{BunTarballs: tarballs, Version: "2.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	reg := testenv.StartRegistry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	refs, manifests := map[string]string{}, map[string]string{}
	for tag, img := range map[string]*testimage.Image{"v1": img1, "v2": img2} {
		ref := reg.Host() + "/rhyssullivan/executor-selfhost:" + tag
		idx, err := testimage.Push(ctx, img.Dir, ref)
		if err != nil {
			t.Fatal(err)
		}
		refs[tag] = ref + "@" + idx.String()
		manifests[tag] = img.Manifests[platform(t)].Encoded()
	}
	return reg, refs, manifests
}
