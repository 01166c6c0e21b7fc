package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
	"github.com/hermesbox/hbx/release"
)

// installKilledAt runs `hbx install --json` and SIGKILLs it as soon as it
// has printed the k-th (0-based) step event; layer-progress events, whose
// count depends on timing, are not counted. It returns the event it killed
// at, or "" when hbx finished first.
func installKilledAt(t *testing.T, b *box, k int) string {
	t.Helper()
	cmd := exec.Command(binary(t), "--config", b.config, "install", "--json")
	cmd.Env = cleanEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	n := 0
	killedAt := ""
	for sc.Scan() {
		var ev struct {
			Event string `json:"event"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Event == "layer-progress" || ev.Event == "result" {
			continue
		}
		if n == k {
			cmd.Process.Kill()
			killedAt = ev.Event
			break
		}
		n++
	}
	go func() { _, _ = bufio.NewReader(out).WriteTo(discard{}) }()
	cmd.Wait()
	return killedAt
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestKillDuringInstall kills hbx install at every step of a first install
// and of an upgrade: current must stay as it was or be complete, the next
// run must converge, and nothing stale may remain.
func TestKillDuringInstall(t *testing.T) {
	requireE2E(t)
	img1 := testImage(t)
	root := testenv.RepoRoot(t)
	tarballs, err := testimage.BunTarballs(root)
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
	refs := map[string]string{}
	for tag, img := range map[string]*testimage.Image{"v1": img1, "v2": img2} {
		ref := reg.Host() + "/rhyssullivan/executor-selfhost:" + tag
		idx, err := testimage.Push(ctx, img.Dir, ref)
		if err != nil {
			t.Fatal(err)
		}
		refs[tag] = ref + "@" + idx.String()
	}
	plat := platform(t)

	// A template runtime directory with v1 active, copied (hardlinked) per upgrade round.
	tmpl := newBox(t, reg, refs["v1"], nil, "")
	if r := tmpl.hbx("install"); r.code != 0 {
		t.Fatalf("install v1: %s", r.stderr)
	}

	kills := 0
	for _, sc := range []struct {
		name   string
		before func(b *box)  // lays out the runtime directory
		old    string        // current before the run ("" = none)
		want   func() string // current after convergence
	}{
		{name: "first install", before: func(*box) {}, old: "", want: func() string { return "releases/" + img2.Manifests[plat].Encoded() }},
		{name: "upgrade", before: func(b *box) {
			if out, err := exec.Command("cp", "-al", tmpl.runtimeDir, b.runtimeDir).CombinedOutput(); err != nil {
				t.Fatalf("cp -al: %v %s", err, out)
			}
		}, old: "releases/" + img1.Manifests[plat].Encoded(), want: func() string { return "releases/" + img2.Manifests[plat].Encoded() }},
	} {
		for k := 0; ; k++ {
			b := newBox(t, reg, refs["v2"], map[string]string{plat: img2.Manifests[plat].String()}, "")
			os.MkdirAll(filepath.Dir(b.runtimeDir), 0o755)
			sc.before(b)
			at := installKilledAt(t, b, k)
			if at == "" {
				break // ran to completion: every step has been a kill point
			}
			kills++
			cur := b.current()
			switch cur {
			case sc.old:
			case sc.want():
				inst, err := release.Current(b.runtimeDir)
				if err != nil {
					t.Fatalf("%s, killed at %s: current names an incomplete release: %v", sc.name, at, err)
				}
				if _, err := inst.Program(); err != nil {
					t.Fatalf("%s, killed at %s: current release has no program: %v", sc.name, at, err)
				}
			default:
				t.Fatalf("%s, killed at step %d (%s): current -> %q, want %q or %q", sc.name, k, at, cur, sc.old, sc.want())
			}
			if r := b.hbx("install"); r.code != 0 {
				t.Fatalf("%s, killed at %s: next install = %d: %s", sc.name, at, r.code, r.stderr)
			}
			if got := b.current(); got != sc.want() {
				t.Fatalf("%s, killed at %s: after the next install current -> %q, want %q", sc.name, at, got, sc.want())
			}
			if stale := staleEntries(t, b.runtimeDir); len(stale) > 0 {
				t.Fatalf("%s, killed at %s: stale paths remain after convergence: %q", sc.name, at, stale)
			}
			t.Logf("%s: killed at step %d (%s): current %q, converged", sc.name, k, at, fmt.Sprint(cur))
		}
	}
	if kills < 20 {
		t.Errorf("only %d kill points, want at least 20", kills)
	}
}

// staleEntries lists what a converged runtime directory should not hold.
func staleEntries(t *testing.T, runtimeDir string) []string {
	t.Helper()
	var stale []string
	ents, err := os.ReadDir(runtimeDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		switch e.Name() {
		case "current", "previous", "releases", "hbx.lock":
		case "blobs": // the blob store (install.keep_blobs): whole, verified blobs only
			stale = append(stale, staleBlobs(t, filepath.Join(runtimeDir, "blobs"))...)
		case release.LayersDir: // layer states: only of a kept release's first layers
			stale = append(stale, staleStates(t, runtimeDir)...)
		default:
			stale = append(stale, e.Name())
		}
	}
	keep := map[string]bool{}
	for _, l := range []string{"current", "previous"} {
		if s, err := os.Readlink(filepath.Join(runtimeDir, l)); err == nil {
			keep[strings.TrimPrefix(s, "releases/")] = true
		}
	}
	rels, _ := os.ReadDir(filepath.Join(runtimeDir, "releases"))
	for _, r := range rels {
		if !keep[r.Name()] {
			stale = append(stale, "releases/"+r.Name())
		}
	}
	return stale
}

// staleStates lists the layer states (layers/<chain hex>) that are not
// the state of a proper prefix of the layers of a release under
// releases/, or lack their files.json.
func staleStates(t *testing.T, runtimeDir string) []string {
	t.Helper()
	want := map[string]bool{}
	rels, _ := os.ReadDir(filepath.Join(runtimeDir, release.ReleasesDir))
	for _, r := range rels {
		inst, err := release.Open(filepath.Join(runtimeDir, release.ReleasesDir, r.Name()))
		if err != nil {
			continue
		}
		for k := 1; k < len(inst.Meta.DiffIDs); k++ {
			want[release.ChainID(inst.Meta.DiffIDs[:k]).Encoded()] = true
		}
	}
	var stale []string
	ents, err := os.ReadDir(filepath.Join(runtimeDir, release.LayersDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(runtimeDir, release.LayersDir, e.Name(), release.FilesFile)); err != nil || !want[e.Name()] {
			stale = append(stale, release.LayersDir+"/"+e.Name())
		}
	}
	return stale
}

// staleBlobs lists what the blob store dir holds besides blobs/sha256/<hex>
// files whose content hashes to their name: a partial download or a
// temporary file left by a killed install is stale.
func staleBlobs(t *testing.T, dir string) []string {
	t.Helper()
	var stale []string
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "sha256" || !e.IsDir() {
			stale = append(stale, "blobs/"+e.Name())
		}
	}
	blobs, _ := os.ReadDir(filepath.Join(dir, "sha256"))
	for _, e := range blobs {
		p := filepath.Join(dir, "sha256", e.Name())
		b, err := os.ReadFile(p)
		if err != nil || !e.Type().IsRegular() || fmt.Sprintf("%x", sha256.Sum256(b)) != e.Name() {
			stale = append(stale, "blobs/sha256/"+e.Name())
		}
	}
	return stale
}
