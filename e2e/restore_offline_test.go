package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	must(t, os.RemoveAll(b.runtimeDir))
	f.stop()

	r := b.hbx("restore", archive)
	if r.code != 0 {
		t.Fatalf("hbx restore with no runtime and no registry = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("hbx restore:\n%s%s", r.stdout, r.stderr)
	sameData(t, b, "after hbx restore", archived)
	if ph, img := restoreJournal(t, b); ph != "not-started" || img != ref {
		t.Errorf("journal after hbx restore: phase %q awaiting %q; want not-started, %s", ph, img, ref)
	}
	st := b.hbx("status")
	t.Logf("hbx status = %d\n%s%s", st.code, st.stdout, st.stderr)
	h := b.hbx("health")
	t.Logf("hbx health = %d\n%s%s", h.code, h.stdout, h.stderr)

	if r := b.hbx("install", "--from", image); r.code != 0 {
		t.Fatalf("hbx install --from the export (registry stopped) = %d\n%s", r.code, r.stderr)
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
	_ = strings.Contains
}

// TestRestoreFromExportE2E: hbx restore --from the release's export on a
// wiped box with the registry stopped is an ordinary restore: the
// runtime installed from the file, the restore committed (no journal, no
// "NOT started"), and hbx supervise healthy on the archive's bytes.
func TestRestoreFromExportE2E(t *testing.T) {
	requireE2E(t)
	b, f, ref, archive, socket, dir, archived := withoutRuntimeBox(t)
	image := filepath.Join(t.TempDir(), "executor.tar")
	if r := b.hbx("export", image); r.code != 0 {
		t.Fatalf("hbx export = %d\n%s", r.code, r.stderr)
	}
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
	s := startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	sameData(t, b, "under hbx supervise", archived)
	_ = ref
}

// TestRestoreFromUnusableImageE2E: hbx restore --from a path that is
// missing, not an image, or holds another release, on a wiped box with
// the registry stopped, is refused and undone (the live data kept, no
// journal): the operator named that file, so it is not a restore
// "without a runtime".
func TestRestoreFromUnusableImageE2E(t *testing.T) {
	requireE2E(t)
	b, f, _, archive, _, _, _ := withoutRuntimeBox(t)
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
	for _, tc := range []struct{ from, want, config string }{
		{filepath.Join(tmp, "missing.tar"), "it does not exist", ""},
		{notImage, "not a tar file", ""},
		{emptyDir, "not an OCI image layout", ""},
		{archive, "not a tar file", ""},
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
