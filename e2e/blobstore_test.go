package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/internal/registrytest"
	"github.com/hermesbox/hbx/internal/testimage"
	"github.com/hermesbox/hbx/internal/units"
	"github.com/hermesbox/hbx/supervisor"
)

// imageManifest reads the manifest of plat from the test image's layout.
func imageManifest(t *testing.T, img *testimage.Image, plat string) v1.Manifest {
	t.Helper()
	var m v1.Manifest
	b := readFile(t, filepath.Join(img.Dir, "blobs", "sha256", img.Manifests[plat].Encoded()))
	if err := json.Unmarshal([]byte(b), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// imageBlobs lists the digests of plat's image: index, manifest, config
// and layers.
func imageBlobs(t *testing.T, img *testimage.Image, plat string) []digest.Digest {
	t.Helper()
	m := imageManifest(t, img, plat)
	out := []digest.Digest{img.IndexDigest, img.Manifests[plat], m.Config.Digest}
	for _, l := range m.Layers {
		out = append(out, l.Digest)
	}
	return out
}

// storeBlobs lists the complete blobs of the runtime directory's store,
// checking each hashes to its name.
func storeBlobs(t *testing.T, runtimeDir string) []digest.Digest {
	t.Helper()
	var out []digest.Digest
	filepath.WalkDir(filepath.Join(runtimeDir, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		dg := digest.NewDigestFromEncoded(digest.SHA256, d.Name())
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if got, err := digest.SHA256.FromReader(f); err != nil || got != dg {
			t.Errorf("stored blob %s hashes to %s (%v)", p, got, err)
		}
		out = append(out, dg)
		return nil
	})
	slices.Sort(out)
	return out
}

// union sorts and deduplicates the digests of lists.
func union(lists ...[]digest.Digest) []digest.Digest {
	var out []digest.Digest
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// blobGets counts the blob GETs the proxy passed to the registry since
// request number from.
func blobGets(p *registrytest.Proxy, from int) (n int, paths []string) {
	for _, r := range p.Requests()[from:] {
		if r.Method == "GET" && strings.Contains(r.Path, "/blobs/") {
			n++
			paths = append(paths, r.Path)
		}
	}
	return n, paths
}

// countedBox is a box whose registry traffic goes through a counting
// proxy; it returns the box, the proxy, and the references of 1.0.0 (the
// default test image) and 2.0.0 (a new top layer over the same base), both
// through the proxy.
func countedBox(t *testing.T) (b *box, p *registrytest.Proxy, v1ref, v2ref string, img1, img2 *testimage.Image) {
	t.Helper()
	reg, img1, ref1 := pushed(t)
	img2 = versionImage(t, "2.0.0")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := reg.Host() + "/rhyssullivan/executor-selfhost"
	d, err := testimage.Push(ctx, img2.Dir, name+":v2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	p = registrytest.NewProxy(t, "http://"+reg.Host())
	v1ref = strings.Replace(ref1, reg.Host(), p.Host(), 1)
	v2ref = p.Host() + "/rhyssullivan/executor-selfhost:v2.0.0@" + d.String()
	b = newBox(t, reg, v1ref, nil, "")
	writeFile(t, b.config, strings.ReplaceAll(readFile(t, b.config), reg.Host(), p.Host()), 0o600)
	return b, p, v1ref, v2ref, img1, img2
}

// twin is a new box with b's configuration (registry, image) and its own
// directories.
func (b *box) twin() *box {
	b.t.Helper()
	dir := b.t.TempDir()
	n := &box{t: b.t, dir: dir, config: filepath.Join(dir, "hbx.yaml"), port: b.port}
	n.runtimeDir = strings.Replace(b.runtimeDir, b.dir, dir, 1)
	n.dataDir = strings.Replace(b.dataDir, b.dir, dir, 1)
	n.stateDir = strings.Replace(b.stateDir, b.dir, dir, 1)
	writeFile(b.t, n.config, strings.ReplaceAll(readFile(b.t, b.config), b.dir, dir), 0o600)
	return n
}

// setImage points the box's config at ref.
func (b *box) setImage(ref string) {
	b.t.Helper()
	c := readFile(b.t, b.config)
	i := strings.Index(c, "  image: ")
	j := strings.Index(c[i:], "\n")
	writeFile(b.t, b.config, c[:i]+"  image: \""+ref+"\""+c[i+j:], 0o600)
}

// TestUpgradeFetchesOnlyChangedLayersE2E: with the default
// install.keep_blobs, moving an installed 1.0.0 box to 2.0.0 (a new top
// layer over the same base) makes the registry serve only the config and
// the layers 1.0.0 lacks (counted at a proxy in front of the real
// registry); the result says the bytes fetched and reused; the store holds
// both images' blobs, each hashing to its name; and the release equals a
// cold install of 2.0.0 (same files.json, --verify clean).
func TestUpgradeFetchesOnlyChangedLayersE2E(t *testing.T) {
	requireE2E(t)
	plat := platform(t)
	b, p, _, v2ref, img1, img2 := countedBox(t)
	r := b.hbx("install", "--json")
	if r.code != 0 {
		t.Fatalf("hbx install 1.0.0 = %d\n%s", r.code, r.stderr)
	}
	if got, want := storeBlobs(t, b.runtimeDir), union(imageBlobs(t, img1, plat)); !slices.Equal(got, want) {
		t.Fatalf("store after the cold install %v, want 1.0.0's blobs %v", got, want)
	}

	m1, m2 := imageManifest(t, img1, plat), imageManifest(t, img2, plat)
	var newLayers []string
	var newBytes, sharedBytes, total int64
	for _, l := range m2.Layers {
		total += l.Size
		if slices.ContainsFunc(m1.Layers, func(o v1.Descriptor) bool { return o.Digest == l.Digest }) {
			sharedBytes += l.Size
		} else {
			newBytes += l.Size
			newLayers = append(newLayers, l.Digest.String())
		}
	}
	if sharedBytes == 0 || len(newLayers) == 0 {
		t.Fatalf("2.0.0 shares %d bytes and has %d new layers with 1.0.0: the test needs both", sharedBytes, len(newLayers))
	}

	b.setImage(v2ref)
	from := len(p.Requests())
	r = b.hbx("install", "--json")
	if r.code != 0 {
		t.Fatalf("hbx install 2.0.0 = %d\n%s", r.code, r.stderr)
	}
	res := lastJSON(t, r.stdout)
	n, paths := blobGets(p, from)
	want := append([]string{m2.Config.Digest.String()}, newLayers...)
	slices.Sort(want)
	var got []string
	for _, path := range paths {
		got = append(got, path[strings.LastIndex(path, "/")+1:])
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the upgrade's blob GETs %v, want only the config and the new layers %v", got, want)
	}
	if res["fetched_bytes"] != float64(newBytes) || res["reused_bytes"] != float64(sharedBytes) {
		t.Errorf("hbx install --json fetched_bytes %v, reused_bytes %v; want %d, %d", res["fetched_bytes"], res["reused_bytes"], newBytes, sharedBytes)
	}
	t.Logf("upgrade: %d blob GETs, %d of %d layer bytes fetched (%.1f%%), %d reused", n, newBytes, total, 100*float64(newBytes)/float64(total), sharedBytes)
	if got, want := storeBlobs(t, b.runtimeDir), union(imageBlobs(t, img1, plat), imageBlobs(t, img2, plat)); !slices.Equal(got, want) {
		t.Errorf("store after the upgrade %v, want the blobs of 1.0.0 and 2.0.0 %v", got, want)
	}
	if r := b.hbx("install", "--verify"); r.code != 0 || !strings.HasPrefix(r.stdout, "up to date") {
		t.Errorf("hbx install --verify after the upgrade = %d: %s%s", r.code, r.stdout, r.stderr)
	}

	// A cold install of 2.0.0 in another runtime directory: same files.
	cold := b.twin()
	if r := cold.hbx("install"); r.code != 0 {
		t.Fatalf("cold hbx install 2.0.0 = %d\n%s", r.code, r.stderr)
	}
	if readFile(t, filepath.Join(b.runtimeDir, "current", "files.json")) != readFile(t, filepath.Join(cold.runtimeDir, "current", "files.json")) {
		t.Errorf("files.json of the upgraded release differs from a cold install's")
	}
	if b.current() != cold.current() {
		t.Errorf("current -> %s after the upgrade, %s after a cold install", b.current(), cold.current())
	}
}

// TestKillDuringReusingInstallE2E: hbx killed with SIGKILL while an
// install that reuses kept blobs downloads the new layer never leaves a
// stored blob that fails its digest; and a kept blob damaged under its
// name (what a power loss can leave) is fetched again by the next
// install, which then succeeds.
func TestKillDuringReusingInstallE2E(t *testing.T) {
	requireE2E(t)
	plat := platform(t)
	b, p, _, v2ref, img1, img2 := countedBox(t)
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install 1.0.0 = %d\n%s", r.code, r.stderr)
	}
	m1, m2 := imageManifest(t, img1, plat), imageManifest(t, img2, plat)
	top := m2.Layers[len(m2.Layers)-1]
	if slices.ContainsFunc(m1.Layers, func(o v1.Descriptor) bool { return o.Digest == top.Digest }) {
		t.Fatal("2.0.0's top layer is 1.0.0's: the test needs a new one")
	}
	// The new layer trickles in, so the kill lands mid-download.
	p.Add(registrytest.Rule{Kind: registrytest.Blob, Path: top.Digest.String(), Times: 1, Fault: registrytest.Drip(8, 100*time.Millisecond)})
	b.setImage(v2ref)
	cmd := exec.Command(binary(t), "--config", b.config, "install")
	cmd.Env = cleanEnv()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(slow(t, 60*time.Second))
	for {
		if slices.ContainsFunc(p.Requests(), func(r registrytest.Request) bool {
			return strings.HasSuffix(r.Path, top.Digest.String()) && r.Fault != "none"
		}) {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the install never requested the new layer")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a few bytes of it written, far from all
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	stored := storeBlobs(t, b.runtimeDir) // each checked against its digest
	if !slices.Contains(stored, m1.Layers[0].Digest) {
		t.Fatalf("the kept base layer is gone after the kill: %v", stored)
	}
	if b.current() != "releases/"+img1.Manifests[plat].Encoded() {
		t.Errorf("current -> %s after the killed install, want 1.0.0's", b.current())
	}

	// Without its kept layer state (as where hard links fail), the next
	// install applies the base layer from the store: the case under test.
	if err := os.RemoveAll(filepath.Join(b.runtimeDir, "layers")); err != nil {
		t.Fatal(err)
	}
	// Damage the kept base layer under its name, size unchanged.
	base := filepath.Join(b.runtimeDir, "blobs", "sha256", m1.Layers[0].Digest.Encoded())
	f, err := os.OpenFile(base, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("damaged"), 1<<16); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	p.Clear()
	from := len(p.Requests())
	r := b.hbx("install", "--json")
	if r.code != 0 {
		t.Fatalf("hbx install after the kill = %d\n%s", r.code, r.stderr)
	}
	if _, paths := blobGets(p, from); !slices.ContainsFunc(paths, func(s string) bool { return strings.HasSuffix(s, m1.Layers[0].Digest.String()) }) {
		t.Errorf("the damaged base layer was not fetched again: blob GETs %v", paths)
	}
	if got, want := storeBlobs(t, b.runtimeDir), union(imageBlobs(t, img1, plat), imageBlobs(t, img2, plat)); !slices.Equal(got, want) {
		t.Errorf("store after the next install %v, want %v", got, want)
	}
	if r := b.hbx("install", "--verify"); r.code != 0 || !strings.HasPrefix(r.stdout, "up to date") {
		t.Errorf("hbx install --verify = %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

// TestKeepBlobsOffE2E: install.keep_blobs false keeps no store after the
// install, and the next release fetches every layer it does not start
// from a kept layer state (the layers it shares with the active release
// below its top one) and its config.
func TestKeepBlobsOffE2E(t *testing.T) {
	requireE2E(t)
	plat := platform(t)
	b, p, _, v2ref, img1, img2 := countedBox(t)
	writeFile(t, b.config, readFile(t, b.config)+"install:\n  keep_blobs: false\n", 0o600)
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install = %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(b.runtimeDir, "blobs")); !os.IsNotExist(err) {
		t.Errorf("blob store kept with keep_blobs false: %v", err)
	}
	b.setImage(v2ref)
	from := len(p.Requests())
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install 2.0.0 = %d\n%s", r.code, r.stderr)
	}
	m1, m2 := imageManifest(t, img1, plat), imageManifest(t, img2, plat)
	shared := 0 // the state 1.0.0's install kept: its layers below the top one
	for shared < len(m1.Layers)-1 && shared < len(m2.Layers) && m1.Layers[shared].Digest == m2.Layers[shared].Digest {
		shared++
	}
	if shared == 0 {
		t.Fatal("2.0.0 shares no layer with 1.0.0: the test needs it to")
	}
	if n, _ := blobGets(p, from); n != len(m2.Layers)-shared+1 {
		t.Errorf("keep_blobs false: %d blob GETs, want the %d layers no kept state holds and the config (%d)", n, len(m2.Layers)-shared, len(m2.Layers)-shared+1)
	}
	if _, err := os.Stat(filepath.Join(b.runtimeDir, "blobs")); !os.IsNotExist(err) {
		t.Errorf("blob store kept with keep_blobs false: %v", err)
	}
}

// TestUpgradeCommandFetchesOnlyChangedLayersE2E: hbx upgrade (under hbx
// supervise, with its backup and health gate) from 1.0.0 to 2.0.0 makes
// the registry serve only the config and the layers 1.0.0 lacks, prints
// the bytes it fetched and reused, and the upgraded box is healthy on a
// release that passes --verify.
func TestUpgradeCommandFetchesOnlyChangedLayersE2E(t *testing.T) {
	requireE2E(t)
	plat := platform(t)
	b, p, _, v2ref, img1, img2 := countedBox(t)
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install 1.0.0 = %d\n%s", r.code, r.stderr)
	}
	socket, dir := supervisorConfig(t, b, "")
	pass := filepath.Join(b.dir, "backup.pass")
	writeFile(t, pass, "correct horse battery staple\n", 0o600)
	writeFile(t, b.config, readFile(t, b.config)+"backup:\n  dir: "+filepath.Join(b.dir, "backups")+"\n  passphrase_file: "+pass+"\n  health_wait: 15s\n", 0o600)
	s := startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})

	m1, m2 := imageManifest(t, img1, plat), imageManifest(t, img2, plat)
	want := []string{m2.Config.Digest.String()}
	var newBytes, sharedBytes int64
	for _, l := range m2.Layers {
		if !slices.ContainsFunc(m1.Layers, func(o v1.Descriptor) bool { return o.Digest == l.Digest }) {
			want = append(want, l.Digest.String())
			newBytes += l.Size
		} else {
			sharedBytes += l.Size
		}
	}
	slices.Sort(want)
	from := len(p.Requests())
	r := b.hbx("upgrade", "--image", v2ref)
	if r.code != 0 {
		t.Fatalf("hbx upgrade = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The repository that answered follows the fetched count (the
	// image's own here: no registry.mirrors).
	repo, _, _ := strings.Cut(v2ref, "@")
	repo = repo[:strings.LastIndex(repo, ":")]
	line := fmt.Sprintf("\n  fetched %s of %s (%s) from %s; reused %s, %s\n", units.Bytes(newBytes), units.Bytes(newBytes+sharedBytes),
		layerCount(len(want)-1), repo, layerCount(len(m2.Layers)-len(want)+1), units.Bytes(sharedBytes))
	if !strings.Contains(r.stdout, line) {
		t.Errorf("hbx upgrade printed\n%s\nwant a line %q", r.stdout, line)
	}
	_, paths := blobGets(p, from)
	var got []string
	for _, path := range paths {
		got = append(got, path[strings.LastIndex(path, "/")+1:])
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("hbx upgrade's blob GETs %v, want only the config and the new layers %v", got, want)
	}
	if b.current() != "releases/"+img2.Manifests[plat].Encoded() {
		t.Errorf("current -> %s after the upgrade, want 2.0.0's", b.current())
	}
	healthyAt(t, b.port, 60*time.Second)
	if got, want := storeBlobs(t, b.runtimeDir), union(imageBlobs(t, img1, plat), imageBlobs(t, img2, plat)); !slices.Equal(got, want) {
		t.Errorf("store after the upgrade %v, want the blobs of 1.0.0 and 2.0.0 %v", got, want)
	}
	if r := b.hbx("install", "--verify"); r.code != 0 || !strings.HasPrefix(r.stdout, "up to date") {
		t.Errorf("hbx install --verify after the upgrade = %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

// layerCount is "1 layer" or "n layers".
func layerCount(n int) string {
	if n == 1 {
		return "1 layer"
	}
	return fmt.Sprintf("%d layers", n)
}
