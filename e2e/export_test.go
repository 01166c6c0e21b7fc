package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/testenv"
)

// skopeo runs skopeo with args and returns its stdout; a failure fails
// the test unless wantFail, which returns the combined output instead.
func skopeo(t *testing.T, wantFail bool, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath("skopeo"); err != nil {
		testenv.Unavailable(t, "skopeo is not installed")
	}
	cmd := exec.Command("skopeo", append([]string{"--insecure-policy"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	switch {
	case wantFail && err == nil:
		t.Fatalf("skopeo %s succeeded, want a refusal", strings.Join(args, " "))
	case wantFail:
		return append(out.Bytes(), errb.Bytes()...)
	case err != nil:
		t.Fatalf("skopeo %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes()
}

// fileDigest is the sha256 digest of the file at p.
func fileDigest(t *testing.T, p string) digest.Digest {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(sum[:]))
}

// TestExportE2E: hbx export of a release installed from the registry
// writes an OCI archive (mode 0644) that skopeo reads: inspect --raw gives
// the pinned index's bytes, a copy of the installed platform to dir: gives
// the pinned child manifest; a copy of every platform is refused (the
// archive holds one platform's blobs, as the README says). Two exports,
// and one to stdout, are byte-identical; stdout on a terminal is refused.
func TestExportE2E(t *testing.T) {
	requireE2E(t)
	plat := platform(t)
	reg, img, ref := pushed(t)
	b := newBox(t, reg, ref, map[string]string{plat: img.Manifests[plat].String()}, "")
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install = %d\n%s", r.code, r.stderr)
	}
	out := filepath.Join(b.dir, "out")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	f1, f2 := filepath.Join(out, "image.tar"), filepath.Join(out, "again.tar")
	r := b.hbx("export", f1)
	if r.code != 0 || !strings.Contains(r.stdout, "exported "+ref) || !strings.Contains(r.stdout, "to "+f1+": ") {
		t.Fatalf("hbx export = %d, want the image and file named:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := b.hbx("export", "--json", f2); r.code != 0 || lastJSON(t, r.stdout)["manifest_digest"] != img.Manifests[plat].String() {
		t.Fatalf("hbx export --json = %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = b.hbx("export", "-")
	if r.code != 0 || !strings.Contains(r.stderr, "exported ") {
		t.Fatalf("hbx export - = %d:\n%s", r.code, r.stderr)
	}
	if _, err := exec.LookPath("script"); err != nil {
		testenv.Missing(t, "script(1) is not installed (apt-get install bsdutils)")
	}
	tty := exec.Command("script", "-qfec", binary(t)+" --config "+b.config+" export -", "/dev/null")
	tty.Env = cleanEnv()
	screen, err := tty.CombinedOutput()
	if code := tty.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(screen), "refuse to write an archive to a terminal") {
		t.Errorf("hbx export - on a terminal = %d (%v), want 2 and a refusal:\n%.300q", code, err, screen)
	}
	a, bb := readFile(t, f1), readFile(t, f2)
	if a != bb || r.stdout != a {
		t.Errorf("exports of one release differ: %d, %d and %d (stdout) bytes", len(a), len(bb), len(r.stdout))
	}
	if fi, err := os.Stat(f1); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("archive mode %v (%v), want 0644", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 2 {
		t.Errorf("export directory holds %d entries, want the 2 archives (no temporaries)", len(ents))
	}

	src := "oci-archive:" + f1 + ":v1.5.12"
	if got := digest.FromBytes(skopeo(t, false, "inspect", "--raw", src)); got != img.IndexDigest {
		t.Errorf("skopeo inspect --raw %s hashes to %s, want the pinned index %s", src, got, img.IndexDigest)
	}
	dir := filepath.Join(b.dir, "copied")
	skopeo(t, false, "copy", "--override-os", "linux", "--override-arch", arch(t), src, "dir:"+dir)
	if got := fileDigest(t, filepath.Join(dir, "manifest.json")); got != img.Manifests[plat] {
		t.Errorf("skopeo copy to dir: manifest %s, want the pinned %s manifest %s", got, plat, img.Manifests[plat])
	}
	if msg := skopeo(t, true, "copy", "--all", src, "dir:"+filepath.Join(b.dir, "all")); len(msg) == 0 {
		t.Error("skopeo copy --all refused the archive without a message")
	}
}

// TestExportNeedsKeptBlobsE2E: without kept blobs (install.keep_blobs
// false) hbx export refuses in one line naming the missing blob, the
// setting and the command that fetches it, and writes nothing; with the
// setting on, hbx install --verify fetches the release's blobs from the
// real registry (the config and every layer, nothing staged again) and
// the export works. A damaged layer is refused the same way and repaired
// by --verify with two blob requests (the config, always fetched, and
// that layer).
func TestExportNeedsKeptBlobsE2E(t *testing.T) {
	requireE2E(t)
	plat := platform(t)
	b, p, _, _, img1, _ := countedBox(t)
	writeFile(t, b.config, readFile(t, b.config)+"install:\n  keep_blobs: false\n", 0o600)
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install = %d\n%s", r.code, r.stderr)
	}
	out := filepath.Join(b.dir, "out")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(out, "image.tar")
	r := b.hbx("export", f)
	if r.code != 1 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 ||
		!strings.Contains(r.stderr, img1.IndexDigest.String()) || !strings.Contains(r.stderr, "missing") ||
		!strings.Contains(r.stderr, "set install.keep_blobs: true and run hbx install --verify") {
		t.Errorf("hbx export without kept blobs = %d, want one line naming the blob, the setting and the command:\n%s", r.code, r.stderr)
	}
	t.Logf("hbx export without kept blobs: %s", r.stderr)
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("a refused export left %d entries in the export directory", len(ents))
	}

	writeFile(t, b.config, strings.Replace(readFile(t, b.config), "keep_blobs: false", "keep_blobs: true", 1), 0o600)
	stamp := readFile(t, filepath.Join(b.runtimeDir, "current", "release.json"))
	from := len(p.Requests())
	r = b.hbx("install", "--verify")
	layers := len(imageManifest(t, img1, plat).Layers)
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("kept blobs fetched again: %d layers", len(imageManifest(t, img1, plat).Layers))) ||
		!strings.Contains(r.stdout, "3 documents (index/manifest/config)") {
		t.Fatalf("hbx install --verify with keep_blobs = %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n, paths := blobGets(p, from); n != layers+1 {
		t.Errorf("hbx install --verify made %d blob GETs, want the config and %d layers: %q", n, layers, paths)
	}
	if got := readFile(t, filepath.Join(b.runtimeDir, "current", "release.json")); got != stamp {
		t.Error("hbx install --verify staged the release again")
	}
	if got, want := storeBlobs(t, b.runtimeDir), union(imageBlobs(t, img1, plat)); !slices.Equal(got, want) {
		t.Errorf("store after --verify %q, want the release's blobs %q", got, want)
	}
	if r := b.hbx("export", f); r.code != 0 {
		t.Fatalf("hbx export after --verify = %d:\n%s", r.code, r.stderr)
	}

	// A layer damaged on disk: refused, named, the archive kept as it was.
	before := readFile(t, f)
	layer := imageManifest(t, img1, plat).Layers[0].Digest
	p0 := filepath.Join(b.runtimeDir, "blobs", "sha256", layer.Encoded())
	blob := []byte(readFile(t, p0))
	blob[len(blob)/2] ^= 0xff
	writeFile(t, p0, string(blob), 0o600)
	r = b.hbx("export", f)
	if r.code != 1 || !strings.Contains(r.stderr, layer.String()) || !strings.Contains(r.stderr, "run hbx install --verify") {
		t.Errorf("hbx export over a damaged layer = %d, want it named with the fix:\n%s", r.code, r.stderr)
	}
	t.Logf("hbx export over a damaged layer: %s", r.stderr)
	if readFile(t, f) != before {
		t.Error("a refused export changed the existing archive")
	}
	if ents, _ := os.ReadDir(out); len(ents) != 1 {
		t.Errorf("a refused export left %d entries in the export directory, want the 1 archive", len(ents))
	}
	from = len(p.Requests())
	if r := b.hbx("install", "--verify"); r.code != 0 {
		t.Fatalf("hbx install --verify over a damaged layer = %d:\n%s", r.code, r.stderr)
	}
	if n, paths := blobGets(p, from); n != 2 {
		t.Errorf("hbx install --verify over a damaged layer made %d blob GETs, want 2 (the config, always fetched, and the layer): %q", n, paths)
	}
	if r := b.hbx("export", f); r.code != 0 || readFile(t, f) != before {
		t.Errorf("hbx export after the repair = %d (archive unchanged: %v):\n%s", r.code, readFile(t, f) == before, r.stderr)
	}
}

// TestExportInstallFromE2E: a release installed from the real registry and
// exported installs with hbx install --from into another runtime
// directory with the registry stopped: the same release (current,
// files.json), --verify clean, and its own export byte-identical. A kept
// layer removed there comes back from the archive with install --verify
// --from, offline. The archive with one byte of a layer changed, or with
// the platform's manifest swapped for another platform's, is refused
// naming the rule, with nothing activated.
func TestExportInstallFromE2E(t *testing.T) {
	requireE2E(t)
	plat := platform(t)
	reg, img, ref := pushed(t)
	b := newBox(t, reg, ref, map[string]string{plat: img.Manifests[plat].String()}, "")
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install = %d\n%s", r.code, r.stderr)
	}
	dir := t.TempDir()
	archive := filepath.Join(dir, "executor.tar")
	if r := b.hbx("export", archive); r.code != 0 {
		t.Fatalf("hbx export = %d\n%s", r.code, r.stderr)
	}
	if err := reg.Stop(); err != nil {
		t.Fatal(err)
	}

	n := b.twin()
	if r := n.hbx("install", "--from", archive); r.code != 0 {
		t.Fatalf("hbx install --from the export (registry stopped) = %d\n%s", r.code, r.stderr)
	}
	if n.current() != b.current() {
		t.Errorf("install --from: current -> %s, the exporting box's -> %s", n.current(), b.current())
	}
	if readFile(t, filepath.Join(n.runtimeDir, "current", "files.json")) != readFile(t, filepath.Join(b.runtimeDir, "current", "files.json")) {
		t.Error("install --from: files.json differs from the exporting box's")
	}
	if r := n.hbx("install", "--verify"); r.code != 0 || !strings.HasPrefix(r.stdout, "up to date") {
		t.Errorf("hbx install --verify after install --from = %d: %s%s", r.code, r.stdout, r.stderr)
	}
	again := filepath.Join(dir, "again.tar")
	if r := n.hbx("export", again); r.code != 0 || readFile(t, again) != readFile(t, archive) {
		t.Errorf("hbx export on the second box = %d, want the same bytes as the first's:\n%s", r.code, r.stderr)
	}

	m := imageManifest(t, img, plat)
	top := m.Layers[len(m.Layers)-1]
	if err := os.Remove(filepath.Join(n.runtimeDir, "blobs", "sha256", top.Digest.Encoded())); err != nil {
		t.Fatal(err)
	}
	if r := n.hbx("install", "--verify", "--from", archive); r.code != 0 || !strings.Contains(r.stdout, "1 kept blob read from the local image again: 1 layer (") {
		t.Errorf("hbx install --verify --from over a removed kept layer (registry stopped) = %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if got, want := storeBlobs(t, n.runtimeDir), union(imageBlobs(t, img, plat)); !slices.Equal(got, want) {
		t.Errorf("store after the offline repair %q, want the release's blobs %q", got, want)
	}

	tampered := filepath.Join(dir, "tampered.tar")
	writeFile(t, tampered, readFile(t, archive), 0o644)
	flipArchiveByte(t, tampered, top.Digest, top.Size)
	unpacked := filepath.Join(dir, "unpacked")
	if err := os.Mkdir(unpacked, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", archive, "-C", unpacked).CombinedOutput(); err != nil {
		t.Fatalf("tar -x %s: %v\n%s", archive, err, out)
	}
	var other string
	for p, d := range img.Manifests {
		if p != plat {
			other = readFile(t, filepath.Join(img.Dir, "blobs", "sha256", d.Encoded()))
		}
	}
	if other == "" {
		t.Fatalf("the test image has no platform beside %s to swap in", plat)
	}
	writeFile(t, filepath.Join(unpacked, "blobs", "sha256", img.Manifests[plat].Encoded()), other, 0o644)
	swapped := filepath.Join(dir, "swapped.tar")
	tarLayout(t, unpacked, swapped)
	for _, tc := range []struct{ from, want string }{
		{tampered, "fetch layer " + top.Digest.String() + " from the archive: digest mismatch"},
		{swapped, "manifest: digest mismatch"},
	} {
		n := b.twin()
		r := n.hbx("install", "--from", tc.from)
		t.Logf("hbx install --from %s: %s", filepath.Base(tc.from), lastLine(r.stderr))
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("hbx install --from %s = %d, want exit 1 and %q:\n%s", filepath.Base(tc.from), r.code, tc.want, r.stderr)
		}
		if n.current() != "" {
			t.Errorf("a refused archive was activated: current -> %s", n.current())
		}
		storeBlobs(t, n.runtimeDir) // every stored blob hashes to its name
	}
}
