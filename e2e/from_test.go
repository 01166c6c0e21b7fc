package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
	"github.com/hermesbox/hbx/supervisor"
)

// skopeoCopy copies the image ref (name:tag@digest, on a plain-HTTP
// registry) with `skopeo copy --all --preserve-digests` to dst
// ("oci-archive:FILE:TAG" or "oci:DIR:TAG"), as a user carrying an image
// to an air-gapped box would.
func skopeoCopy(t *testing.T, ref, dst string) {
	t.Helper()
	bin, err := exec.LookPath("skopeo")
	if err != nil {
		testenv.Missing(t, "skopeo (scripts/testdeps.sh installs it with apt-get)")
	}
	name, dg, _ := strings.Cut(ref, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i] // skopeo takes name@digest, not name:tag@digest
	}
	ctx, cancel := context.WithTimeout(context.Background(), slow(t, 2*time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--insecure-policy", "copy", "--all", "--preserve-digests", "--quiet",
		"--src-tls-verify=false", "docker://"+name+"@"+dg, dst)
	cmd.Env = append(cleanEnv(), "HOME="+t.TempDir()) // no user registries.conf or auth
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("skopeo copy %s %s: %v\n%s", ref, dst, err, out)
	}
}

// tarLayout writes the OCI layout dir as the OCI archive file.
func tarLayout(t *testing.T, dir, file string) {
	t.Helper()
	if out, err := exec.Command("tar", "-C", dir, "-cf", file, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar %s: %v\n%s", dir, err, out)
	}
}

// flipArchiveByte flips one byte in the middle of the blob d inside the
// OCI archive file (found by its tar header's name field).
func flipArchiveByte(t *testing.T, file string, d digest.Digest, size int64) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	name := []byte("blobs/sha256/" + d.Encoded())
	i := 0
	for {
		j := bytes.Index(b[i:], name)
		if j < 0 {
			t.Fatalf("no tar header for %s in %s", d, file)
		}
		i += j
		if hdr := i - i%512; bytes.HasSuffix(bytes.TrimRight(b[hdr:hdr+100], "\x00"), name) {
			b[hdr+512+int(size/2)] ^= 1
			break
		}
		i++
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyLayout copies the OCI layout src to a new directory.
func copyLayout(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "layout")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestInstallFromLocalImageE2E: the test image pushed to the real
// registry and copied with `skopeo copy --all` into an OCI archive and an
// OCI layout directory installs, with the registry stopped, into fresh
// runtime directories as the same release a registry install gives (same
// current, same files.json, --verify clean). An archive with one layer
// byte changed, or with the platform's manifest swapped for another, is
// refused naming the archive and the rule, with nothing activated and
// every stored blob hashing to its name.
func TestInstallFromLocalImageE2E(t *testing.T) {
	requireE2E(t)
	plat := platform(t)
	reg, img, ref := pushed(t)
	b := newBox(t, reg, ref, nil, "")
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install from the registry = %d\n%s", r.code, r.stderr)
	}
	dir := t.TempDir()
	archive, layout := filepath.Join(dir, "executor.tar"), filepath.Join(dir, "layout")
	skopeoCopy(t, ref, "oci-archive:"+archive+":v1.5.12")
	skopeoCopy(t, ref, "oci:"+layout+":v1.5.12")
	if err := reg.Stop(); err != nil {
		t.Fatal(err)
	}
	wantFiles := readFile(t, filepath.Join(b.runtimeDir, "current", "files.json"))
	for _, from := range []string{archive, layout} {
		n := b.twin()
		if r := n.hbx("install", "--from", from); r.code != 0 {
			t.Fatalf("hbx install --from %s (registry stopped) = %d\n%s", from, r.code, r.stderr)
		}
		if n.current() != b.current() {
			t.Errorf("install --from %s: current -> %s, a registry install's -> %s", from, n.current(), b.current())
		}
		if readFile(t, filepath.Join(n.runtimeDir, "current", "files.json")) != wantFiles {
			t.Errorf("install --from %s: files.json differs from a registry install's", from)
		}
		if r := n.hbx("install", "--verify"); r.code != 0 || !strings.HasPrefix(r.stdout, "up to date") {
			t.Errorf("hbx install --verify after install --from %s = %d: %s%s", from, r.code, r.stdout, r.stderr)
		}
		if got, want := storeBlobs(t, n.runtimeDir), union(imageBlobs(t, img, plat)); strings.Join(digestStrings(got), ",") != strings.Join(digestStrings(want), ",") {
			t.Errorf("install --from %s: store %v, want the image's blobs %v", from, got, want)
		}
		if _, err := os.Stat(filepath.Join(n.runtimeDir, "tmp")); err == nil {
			t.Errorf("install --from %s left the runtime directory's tmp/", from)
		}
	}

	m := imageManifest(t, img, plat)
	top := m.Layers[len(m.Layers)-1]
	tampered := filepath.Join(t.TempDir(), "tampered.tar")
	writeFile(t, tampered, readFile(t, archive), 0o644)
	flipArchiveByte(t, tampered, top.Digest, top.Size)
	swapped := copyLayout(t, layout)
	var other string
	for p, d := range img.Manifests {
		if p != plat {
			other = readFile(t, filepath.Join(layout, "blobs", "sha256", d.Encoded()))
		}
	}
	if other == "" {
		t.Fatalf("the test image has no platform beside %s to swap in", plat)
	}
	writeFile(t, filepath.Join(swapped, "blobs", "sha256", img.Manifests[plat].Encoded()), other, 0o644)
	swappedArchive := filepath.Join(t.TempDir(), "swapped.tar")
	tarLayout(t, swapped, swappedArchive)
	for _, tc := range []struct{ from, want string }{
		{tampered, "fetch layer " + top.Digest.String() + " from the archive: digest mismatch"},
		{swappedArchive, "manifest: digest mismatch"},
	} {
		n := b.twin()
		r := n.hbx("install", "--from", tc.from)
		t.Logf("hbx install --from %s: %s", filepath.Base(tc.from), strings.TrimSpace(r.stderr))
		if r.code != 1 || !strings.Contains(r.stderr, "OCI archive "+tc.from+": ") || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("hbx install --from %s = %d, want exit 1 naming the archive and %q:\n%s", tc.from, r.code, tc.want, r.stderr)
		}
		if n.current() != "" {
			t.Errorf("a refused archive was activated: current -> %s", n.current())
		}
		storeBlobs(t, n.runtimeDir) // every stored blob hashes to its name
	}
}

// digestStrings is ds as strings.
func digestStrings(ds []digest.Digest) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}

// TestUpgradeFromLocalImageE2E: hbx upgrade --from an OCI archive of the
// second test-image version (skopeo copy --all) moves a supervised box to
// it with the registry stopped: the new release is active and healthy.
func TestUpgradeFromLocalImageE2E(t *testing.T) {
	requireE2E(t)
	plat := platform(t)
	reg, _, ref := pushed(t)
	img2 := versionImage(t, "2.0.0")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := reg.Host() + "/rhyssullivan/executor-selfhost"
	d, err := testimage.Push(ctx, img2.Dir, name+":v2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	v2ref := name + ":v2.0.0@" + d.String()
	b := newBox(t, reg, ref, nil, "")
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install 1.0.0 = %d\n%s", r.code, r.stderr)
	}
	archive := filepath.Join(t.TempDir(), "executor-2.0.0.tar")
	skopeoCopy(t, v2ref, "oci-archive:"+archive+":v2.0.0")
	if err := reg.Stop(); err != nil {
		t.Fatal(err)
	}
	// The 2.0.0 archive is not the pinned 1.0.0: install --from names both
	// by digest and tag, without the skopeo --all hint (it was copied so).
	v1name, v1digest, _ := strings.Cut(ref, "@")
	want := "it holds " + d.String() + " (tag v2.0.0) but the pin wants " + v1digest + " (tag " + v1name[strings.LastIndex(v1name, ":")+1:] + ")"
	if r := b.twin().hbx("install", "--from", archive); r.code != 1 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "skopeo") {
		t.Errorf("hbx install --from the 2.0.0 archive, 1.0.0 pinned = %d: %s; want exit 1 saying %q, no skopeo hint", r.code, r.stderr, want)
	} else {
		t.Logf("hbx install --from another release: %s", r.stderr)
	}
	socket, dir := supervisorConfig(t, b, "")
	pass := filepath.Join(b.dir, "backup.pass")
	writeFile(t, pass, "correct horse battery staple\n", 0o600)
	writeFile(t, b.config, readFile(t, b.config)+"backup:\n  dir: "+filepath.Join(b.dir, "backups")+"\n  passphrase_file: "+pass+"\n  health_wait: 15s\n", 0o600)
	s := startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})

	if r := b.hbx("upgrade", "--image", v2ref, "--from", archive); r.code != 0 {
		t.Fatalf("hbx upgrade --from %s (registry stopped) = %d\n%s%s", archive, r.code, r.stdout, r.stderr)
	}
	if b.current() != "releases/"+img2.Manifests[plat].Encoded() {
		t.Errorf("current -> %s after upgrade --from, want 2.0.0's", b.current())
	}
	healthyAt(t, b.port, 60*time.Second)
	if r := b.hbx("install", "--verify"); r.code != 0 || !strings.HasPrefix(r.stdout, "up to date") {
		t.Errorf("hbx install --verify after upgrade --from = %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

// withBackup appends backup settings (its own dir, the shared test
// passphrase) to b's config.
func (b *box) withBackup() {
	b.t.Helper()
	pass := filepath.Join(b.dir, "backup.pass")
	writeFile(b.t, pass, "correct horse battery staple\n", 0o600)
	writeFile(b.t, b.config, readFile(b.t, b.config)+"backup:\n  dir: "+filepath.Join(b.dir, "backups")+"\n  passphrase_file: "+pass+"\n  health_wait: 15s\n", 0o600)
}

// TestRestoreFromLocalImageE2E: hbx restore --from installs the archive's
// runtime from an OCI archive: an archive written on a 2.0.0 box is
// restored onto a supervised 1.0.0 box that never had 2.0.0, with the
// registry stopped; 2.0.0 is active and pinned, the data is the
// archive's, Executor healthy.
func TestRestoreFromLocalImageE2E(t *testing.T) {
	requireE2E(t)
	reg, _, v1ref := pushed(t)
	img2 := versionImage(t, "2.0.0")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := reg.Host() + "/rhyssullivan/executor-selfhost"
	d, err := testimage.Push(ctx, img2.Dir, name+":v2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	v2ref := name + ":v2.0.0@" + d.String()

	// The archive X, written by 2.0.0 on another box.
	w := newBox(t, reg, v2ref, nil, "")
	w.withBackup()
	if r := w.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install 2.0.0 = %d\n%s", r.code, r.stderr)
	}
	if err := os.MkdirAll(w.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(w.dataDir, "generation"), "v2 data", 0o600)
	r := w.hbx("backup", "--json")
	if r.code != 0 {
		t.Fatalf("hbx backup on the 2.0.0 box = %d: %s", r.code, r.stderr)
	}
	x := lastJSON(t, r.stdout)["path"].(string)
	image := filepath.Join(t.TempDir(), "executor-2.0.0.tar")
	skopeoCopy(t, v2ref, "oci-archive:"+image+":v2.0.0")
	v1image := filepath.Join(t.TempDir(), "executor-1.0.0.tar")
	skopeoCopy(t, v1ref, "oci-archive:"+v1image+":v1.5.12")

	b := newBox(t, reg, v1ref, nil, "")
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install 1.0.0 = %d\n%s", r.code, r.stderr)
	}
	socket, dir := supervisorConfig(t, b, "")
	b.withBackup()
	s := startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	if err := reg.Stop(); err != nil {
		t.Fatal(err)
	}

	// An image of another release (1.0.0's) is refused, naming the
	// archive's image; the restore is undone.
	if r := b.hbx("restore", x, "--from", v1image); r.code == 0 ||
		!strings.Contains(r.stderr, "but the archive's image is "+d.String()+" (tag v2.0.0)") || strings.Contains(r.stderr, "the configured image's index") {
		t.Errorf("hbx restore X --from a 1.0.0 image = %d:\n%s%s\nwant a refusal naming the archive's image %s", r.code, r.stdout, r.stderr, d)
	} else {
		t.Logf("hbx restore --from another release: %s", r.stderr)
	}
	healthyAt(t, b.port, 60*time.Second)

	r = b.hbx("restore", x, "--from", image)
	if r.code != 0 {
		t.Fatalf("hbx restore X --from %s (registry stopped) = %d\n%s%s", image, r.code, r.stdout, r.stderr)
	}
	t.Logf("restore --from: %s", strings.TrimSpace(r.stdout))
	if v := b.activeVersion(); v != "2.0.0" {
		t.Errorf("active version %s after restore --from, want the archive's 2.0.0", v)
	}
	if img := b.configuredImage(); img != v2ref {
		t.Errorf("executor.image %s after restore --from, want %s", img, v2ref)
	}
	if g := readFile(t, filepath.Join(b.dataDir, "generation")); g != "v2 data" {
		t.Errorf("data after restore --from: generation %q, want the archive's", g)
	}
	healthyAt(t, b.port, 60*time.Second)
}

// TestInstallFromOverDataE2E: hbx install --from that changes the active
// release over existing data (no supervisor) goes the recorded way, with
// the stage read from the archive: registry stopped, pre-change backup,
// 2.0.0 active; hbx rollback then brings 1.0.0 back without a network.
func TestInstallFromOverDataE2E(t *testing.T) {
	requireE2E(t)
	reg, _, v1ref := pushed(t)
	img2 := versionImage(t, "2.0.0")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := reg.Host() + "/rhyssullivan/executor-selfhost"
	d, err := testimage.Push(ctx, img2.Dir, name+":v2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	v2ref := name + ":v2.0.0@" + d.String()
	b := newBox(t, reg, v1ref, nil, "")
	b.withBackup()
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install 1.0.0 = %d\n%s", r.code, r.stderr)
	}
	if err := os.MkdirAll(b.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(b.dataDir, "generation"), "v1 data", 0o600)
	archive := filepath.Join(t.TempDir(), "executor-2.0.0.tar")
	skopeoCopy(t, v2ref, "oci-archive:"+archive+":v2.0.0")
	if err := reg.Stop(); err != nil {
		t.Fatal(err)
	}
	b.setImage(v2ref)
	r := b.hbx("install", "--from", archive)
	if r.code != 0 || !strings.Contains(r.stdout, "pre-change backup: ") {
		t.Fatalf("hbx install --from over data (registry stopped) = %d, want a recorded change\n%s%s", r.code, r.stdout, r.stderr)
	}
	if v := b.activeVersion(); v != "2.0.0" {
		t.Errorf("active version %s after install --from, want 2.0.0", v)
	}
	if r := b.hbx("rollback"); r.code != 0 || b.activeVersion() != "1.0.0" {
		t.Errorf("hbx rollback after install --from = %d (active %s), want 1.0.0\n%s%s", r.code, b.activeVersion(), r.stdout, r.stderr)
	}
}
