package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/supervisor"
)

// TestRestoreWithoutRuntimeOfflineE2E is issue 17's restore test whole,
// the offline way: the release exported on the source box (hbx export)
// before its runtime directory is wiped, the registry stopped to the end.
// hbx restore puts the data back with nothing started and says, in one
// line each (restore, hbx status, hbx health), how to install the
// runtime offline; hbx install --from the export activates the awaited
// release; hbx supervise comes up healthy on the restored secret.key and
// data.db bytes and finishes the restore (journal gone, hbx status 0).
func TestRestoreWithoutRuntimeOfflineE2E(t *testing.T) {
	requireE2E(t)
	b, f, ref, archive, socket, dir, archived := withoutRuntimeBox(t)
	image := filepath.Join(t.TempDir(), "executor.tar")
	if r := b.hbx("export", image); r.code != 0 {
		t.Fatalf("hbx export = %d\n%s", r.code, r.stderr)
	}
	release := b.current()
	must(t, os.RemoveAll(b.runtimeDir))
	f.stop()

	r := b.hbx("restore", archive)
	if r.code != 3 { // restored, not started
		t.Fatalf("hbx restore with no runtime and no registry = %d, want 3\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("hbx restore:\n%s", r.stdout)
	sameData(t, b, "after hbx restore", archived)
	if ph, img := restoreJournal(t, b); ph != "not-started" || img != ref {
		t.Errorf("journal after hbx restore: phase %q awaiting %q; want not-started, %s", ph, img, ref)
	}
	next := offlineSteps(ref)
	if l := lineWith(r.stdout, "NOT started: "); !strings.Contains(l, ref+" could not be installed (") || !strings.HasSuffix(l, "): "+next) {
		t.Errorf("hbx restore's NOT started line:\n%s\nwant it to name %s and end with\n%s", l, ref, next)
	}
	// hbx status, with no supervisor (hbx supervise would refuse to
	// start): exit 3, one line naming the image and the offline way.
	st := b.hbx("status")
	t.Logf("hbx status = %d\n%s%s", st.code, st.stdout, st.stderr)
	if l := lineWith(st.stderr, ref); st.code != 3 || !strings.HasPrefix(l, "hbx: the restored data awaits its runtime: "+ref+", which wrote the data restored from "+archive) || !strings.Contains(l, ": "+next+" (journal ") || !strings.Contains(l, "; no supervisor is running on ") {
		t.Errorf("hbx status = %d, line %q; want exit 3 and a line naming %s ending with the offline steps", st.code, l, ref)
	}
	h := b.hbx("health")
	t.Logf("hbx health = %d\n%s%s", h.code, h.stdout, h.stderr)
	if l := lineWith(h.stdout, "release "); h.code != 1 || !strings.HasPrefix(l, "fail  release ") || !strings.Contains(l, "the restored data awaits its runtime: "+ref+", which wrote") || !strings.Contains(l, ": "+next+" (journal ") {
		t.Errorf("hbx health = %d, release line %q; want a failed release check naming %s with the offline steps", h.code, l, ref)
	}

	if r := b.hbx("install", "--from", image); r.code != 0 {
		t.Fatalf("hbx install --from the export (registry stopped) = %d\n%s", r.code, r.stderr)
	}
	if b.current() != release {
		t.Errorf("hbx install --from the export: current -> %q, want the exported %s", b.current(), release)
	}
	if ph, _ := restoreJournal(t, b); ph != "not-started" {
		t.Errorf("journal after hbx install --from: phase %q, want not-started until hbx supervise", ph)
	}
	s := startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	sameData(t, b, "under hbx supervise", archived)
	deadline := time.Now().Add(slow(t, 30*time.Second))
	for ph, _ := restoreJournal(t, b); ph != ""; ph, _ = restoreJournal(t, b) {
		if time.Now().After(deadline) {
			t.Fatalf("restore journal still in phase %q under a healthy hbx supervise", ph)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := b.hbx("status"); r.code != 0 {
		t.Errorf("hbx status = %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

// offlineSteps is the text that says what to run on data restored
// without the runtime ref (name:tag@digest), pinned here word for word.
func offlineSteps(ref string) string {
	nameTag, dg, _ := strings.Cut(ref, "@")
	i := strings.LastIndex(nameTag, ":")
	return "install it: `hbx install` once the registry answers, or offline `hbx install --from FILE` with FILE written by `hbx export FILE` on a box where it is active or by " +
		"`skopeo copy --all --preserve-digests docker://" + nameTag[:i] + "@" + dg + " oci-archive:FILE:" + nameTag[i+1:] + "` where the registry answers (executor.image must name it); " +
		"then start `hbx supervise` (a running one starts the programs within seconds); " +
		"or, if it cannot be had, restore another archive over this data: `hbx restore ARCHIVE`"
}

// lineWith is the first line of out containing s, without its newline
// and leading spaces; "" when none does.
func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return strings.TrimLeft(l, " ")
		}
	}
	return ""
}

// TestRestoreFromExportE2E: hbx restore --from the release's export on a
// wiped box with the registry stopped is an ordinary restore: the
// runtime installed from the file, the restore committed (no journal, no
// "NOT started"), and hbx supervise healthy on the archive's bytes.
func TestRestoreFromExportE2E(t *testing.T) {
	requireE2E(t)
	b, f, _, archive, socket, dir, archived := withoutRuntimeBox(t)
	image := filepath.Join(t.TempDir(), "executor.tar")
	if r := b.hbx("export", image); r.code != 0 {
		t.Fatalf("hbx export = %d\n%s", r.code, r.stderr)
	}
	release := b.current()
	must(t, os.RemoveAll(b.runtimeDir))
	f.stop()
	r := b.hbx("restore", archive, "--from", image)
	t.Logf("hbx restore --from:\n%s%s", r.stdout, r.stderr)
	if r.code != 0 || strings.Contains(r.stdout, "NOT started") {
		t.Fatalf("hbx restore --from the export on a wiped box (registry stopped) = %d, want an ordinary restore\n%s%s", r.code, r.stdout, r.stderr)
	}
	if ph, _ := restoreJournal(t, b); ph != "" {
		t.Errorf("journal after hbx restore --from: phase %q, want none", ph)
	}
	sameData(t, b, "after hbx restore --from", archived)
	if b.current() != release {
		t.Errorf("hbx restore --from the export: current -> %q, want the exported %s", b.current(), release)
	}
	s := startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	sameData(t, b, "under hbx supervise", archived)
}

// TestRestoreFromUnusableImageE2E: hbx restore --from a path that is
// not an image, holds another release, or is the right image read past
// install.timeout, on a wiped box with the registry stopped, is refused
// and undone (the live data kept, no journal): the operator named that
// file, so it is not a restore "without a runtime". A --from that does not
// exist is refused before anything starts (exit 2).
func TestRestoreFromUnusableImageE2E(t *testing.T) {
	requireE2E(t)
	b, f, ref, archive, _, _, _ := withoutRuntimeBox(t)
	live := readFile(t, filepath.Join(b.dataDir, "data.db"))
	tmp := t.TempDir()
	notImage := filepath.Join(tmp, "notes.txt")
	writeFile(t, notImage, "not an image\n", 0o644)
	emptyDir := filepath.Join(tmp, "empty")
	must(t, os.Mkdir(emptyDir, 0o755))
	image := filepath.Join(tmp, "executor.tar")
	if r := b.hbx("export", image); r.code != 0 {
		t.Fatalf("hbx export = %d\n%s", r.code, r.stderr)
	}
	must(t, os.RemoveAll(b.runtimeDir))
	f.stop()
	cfg := readFile(t, b.config)
	missing := filepath.Join(tmp, "missing.tar")
	if r := b.hbx("restore", archive, "--from", missing); r.code != 2 || strings.Contains(r.stderr, "restore undone") || !strings.Contains(r.stderr, missing+": not usable: it does not exist") {
		t.Errorf("hbx restore --from %s = %d, want exit 2 naming it, nothing to undo\n%s", missing, r.code, r.stderr)
	}
	for _, tc := range []struct{ from, want, config string }{
		{notImage, "not a tar file", ""},
		{emptyDir, "not an OCI image layout", ""},
		{archive, "not a tar file", ""},
		{versionImage(t, "2.0.0").Dir, "but the archive's image is " + strings.SplitN(ref, "@", 2)[1], ""}, // another release
		// The right image, read too slowly: the install's deadline is
		// not "the registry is away" either.
		{image, "install deadline passed", "install:\n  timeout: 1ms\n  min_rate: 0\n"},
	} {
		writeFile(t, b.config, cfg+tc.config, 0o600)
		from := tc.from
		r := b.hbx("restore", archive, "--from", from)
		t.Logf("hbx restore --from %s = %d\n%s%s", from, r.code, r.stdout, r.stderr)
		if r.code != 1 || strings.Contains(r.stdout, "NOT started") || !strings.Contains(r.stderr, "restore undone") || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("hbx restore --from %s = %d, want exit 1, restore undone, %q", from, r.code, tc.want)
		}
		if ph, _ := restoreJournal(t, b); ph != "" {
			t.Errorf("journal after hbx restore --from %s: phase %q, want none", from, ph)
		}
		if db := readFile(t, filepath.Join(b.dataDir, "data.db")); db != live {
			t.Errorf("hbx restore --from %s changed data.db", from)
		}
	}
}

// TestInstallFromOtherReleaseAwaitingE2E: on data restored without its
// runtime (wiped box, registry away), hbx install --from a file holding
// another release (2.0.0, as an OCI layout and as an OCI archive) is
// refused naming the awaited image, with nothing activated and the
// journal still waiting; so is the same with executor.image moved to
// 2.0.0. The skopeo command the restore's message gives, run where the
// registry answers, writes a file hbx install --from accepts offline.
func TestInstallFromOtherReleaseAwaitingE2E(t *testing.T) {
	requireE2E(t)
	b, f, ref, archive, _, _, _ := withoutRuntimeBox(t)
	img2 := versionImage(t, "2.0.0")
	tmp := t.TempDir()
	tar2 := filepath.Join(tmp, "executor-2.0.0.tar")
	tarLayout(t, img2.Dir, tar2)
	release := b.current()
	must(t, os.RemoveAll(b.runtimeDir))
	f.stop()
	r := b.hbx("restore", archive)
	if r.code != 3 || !strings.Contains(r.stdout, "NOT started") {
		t.Fatalf("hbx restore = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	cfg := readFile(t, b.config)
	nameTag, _, _ := strings.Cut(ref, "@")
	v2 := nameTag[:strings.LastIndex(nameTag, ":")] + ":v2.0.0@" + img2.IndexDigest.String()
	for _, tc := range []struct{ from, image string }{{img2.Dir, ""}, {tar2, ""}, {tar2, v2}} {
		if tc.image != "" {
			b.setImage(tc.image)
		}
		r := b.hbx("install", "--from", tc.from)
		t.Logf("hbx install --from %s (executor.image %s) = %d\n%s", tc.from, tc.image, r.code, r.stderr)
		if l := lastLine(r.stderr); r.code != 1 || !strings.HasPrefix(l, "hbx: install: ") || !strings.Contains(l, ref) {
			t.Errorf("hbx install --from %s (2.0.0; executor.image %q) = %d, want exit 1 naming the awaited %s", filepath.Base(tc.from), tc.image, r.code, ref)
		}
		if b.current() != "" {
			t.Errorf("hbx install --from %s activated %s", filepath.Base(tc.from), b.current())
		}
		if ph, img := restoreJournal(t, b); ph != "not-started" || img != ref {
			t.Errorf("journal after hbx install --from %s: phase %q awaiting %q", filepath.Base(tc.from), ph, img)
		}
		writeFile(t, b.config, cfg, 0o600)
	}

	// The skopeo command the message gives, run where the registry
	// answers (plain HTTP here), writes the file to install offline.
	l := lineWith(r.stdout, "NOT started: ")
	i := strings.Index(l, "`skopeo copy ")
	j := strings.Index(l[i+1:], "`")
	if i < 0 || j < 0 {
		t.Fatalf("no skopeo command in %q", l)
	}
	image := filepath.Join(tmp, "executor.tar")
	args := strings.Fields(strings.ReplaceAll(l[i+1:i+1+j], "oci-archive:FILE:", "oci-archive:"+image+":"))
	bin, err := exec.LookPath(args[0])
	if err != nil {
		testenv.Missing(t, "skopeo (scripts/testdeps.sh installs it with apt-get)")
	}
	args = append([]string{"--insecure-policy", args[1], "--src-tls-verify=false"}, args[2:]...)
	f.start()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(cleanEnv(), "HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("skopeo %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	f.stop()
	if r := b.hbx("install", "--from", image); r.code != 0 {
		t.Fatalf("hbx install --from the skopeo copy (registry stopped) = %d\n%s", r.code, r.stderr)
	}
	if b.current() != release {
		t.Errorf("hbx install --from the skopeo copy: current -> %q, want the awaited %s", b.current(), release)
	}
}
