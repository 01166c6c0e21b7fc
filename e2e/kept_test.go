package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/supervisor"
)

// TestRolledBackCopiesE2E: with backup.keep_pre_restore 1, three
// upgrade-and-rollback cycles leave one <data_dir>.rolled-back-* copy, the
// newest; hbx backup list (and --json) shows it beside the archives; and
// the manual step its help gives brings it back.
func TestRolledBackCopiesE2E(t *testing.T) {
	requireE2E(t)
	b, s, _, v2, _ := upgradeBox(t)
	c := readFile(t, b.config)
	writeFile(t, b.config, strings.Replace(c, "  health_wait: 15s\n", "  health_wait: 15s\n  keep_pre_restore: 1\n", 1), 0o600)
	var last string
	for i := range 3 {
		if r := b.hbx("upgrade", "--image", v2); r.code != 0 {
			t.Fatalf("cycle %d: hbx upgrade = %d: %s", i, r.code, r.stderr)
		}
		os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("written by v2, cycle "+string(rune('0'+i))), 0o600)
		r := b.hbx("rollback", "--json")
		if r.code != 0 {
			t.Fatalf("cycle %d: hbx rollback = %d: %s", i, r.code, r.stderr)
		}
		last, _ = lastJSON(t, r.stdout)["kept_aside"].(string)
		time.Sleep(1100 * time.Millisecond) // copies are named to the second
	}
	aside, _ := filepath.Glob(b.dataDir + ".rolled-back-*")
	if len(aside) != 1 || aside[0] != last {
		t.Fatalf("rolled-back copies %q, want only the newest %s", aside, last)
	}
	r := b.hbx("backup", "list")
	if r.code != 0 || !regexpMatch(`(?m)^\S+ \S+ +rolled-back +\S+ \S+ +\d+ +- +`+last+`$`, r.stdout) || !strings.Contains(r.stdout, " pre-upgrade ") {
		t.Errorf("hbx backup list = %d, want the archives and the rolled-back copy:\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = b.hbx("backup", "list", "--json")
	var list []struct{ Kind, Path string }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("hbx backup list --json: %v\n%s", err, r.stdout)
	}
	kinds := map[string]int{}
	for _, e := range list {
		kinds[e.Kind]++
	}
	if kinds["rolled-back"] != 1 || kinds["pre-upgrade"] == 0 {
		t.Errorf("hbx backup list --json kinds %v, want archives and one rolled-back copy", kinds)
	}

	// The manual step: the release that wrote it, then swap it in.
	if r := b.hbx("upgrade", "--image", v2); r.code != 0 {
		t.Fatalf("hbx upgrade = %d: %s", r.code, r.stderr)
	}
	if r := b.hbx("stop", "all"); r.code != 0 {
		t.Fatalf("hbx stop all = %d: %s", r.code, r.stderr)
	}
	if err := os.Rename(b.dataDir, b.dataDir+".replaced"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(last, b.dataDir); err != nil {
		t.Fatal(err)
	}
	if r := b.hbx("start", "all"); r.code != 0 {
		t.Fatalf("hbx start all = %d: %s", r.code, r.stderr)
	}
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	if g := readFile(t, filepath.Join(b.dataDir, "generation")); g != "written by v2, cycle 2" {
		t.Errorf("generation after bringing the copy back = %q", g)
	}
	if st := readState(t, b.dataDir); st.Format != 2 {
		t.Errorf("state after bringing the copy back %+v, want format 2", st)
	}
	if r := b.hbx("health"); r.code != 0 {
		t.Errorf("hbx health = %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

// TestRolledBackCopyNameTakenE2E: when the rolled-back copy's name is
// taken (a non-empty directory of the same second), hbx rollback keeps
// the data the newer release wrote under a fresh rolled-back name, byte
// for byte, and a later hbx restore with backup.keep_pre_restore 1 (whose
// prune removes pre-restore copies) leaves it. Before, the rename aside
// failed, the data stayed a pre-restore copy and that restore removed it.
func TestRolledBackCopyNameTakenE2E(t *testing.T) {
	requireE2E(t)
	b, _, _, v2, _ := upgradeBox(t)
	c := readFile(t, b.config)
	writeFile(t, b.config, strings.Replace(c, "  health_wait: 15s\n", "  health_wait: 15s\n  keep_pre_restore: 1\n", 1), 0o600)
	if r := b.hbx("upgrade", "--image", v2); r.code != 0 {
		t.Fatalf("hbx upgrade = %d: %s", r.code, r.stderr)
	}
	const written = "written by v2, held by no archive"
	writeFile(t, filepath.Join(b.dataDir, "generation"), written, 0o600)
	// Every name the rollback could stamp within the next two minutes.
	now := time.Now()
	for s := range 120 {
		taken := datadir.RolledBack.Path(b.dataDir, datadir.Stamp(now.Add(time.Duration(s)*time.Second)))
		writeFile(t, filepath.Join(mkdir(t, taken), "someone-elses"), "not ours", 0o600)
	}
	r := b.hbx("rollback", "--json")
	if r.code != 0 {
		t.Fatalf("hbx rollback = %d: %s", r.code, r.stderr)
	}
	res := lastJSON(t, r.stdout)
	kept, _ := res["kept_aside"].(string)
	archive, _ := res["backup"].(string)
	if !datadir.RolledBack.Of(filepath.Base(b.dataDir), filepath.Base(kept)) {
		t.Errorf("hbx rollback kept the replaced data at %q, want a rolled-back copy; notes %v", kept, res["notes"])
	}
	if g := readFile(t, filepath.Join(kept, "generation")); g != written {
		t.Fatalf("generation in %s = %q, want %q", kept, g, written)
	}
	if r := b.hbx("restore", archive); r.code != 0 {
		t.Fatalf("hbx restore %s = %d: %s", archive, r.code, r.stderr)
	}
	if g, err := os.ReadFile(filepath.Join(kept, "generation")); err != nil || string(g) != written {
		t.Errorf("generation in %s after hbx restore (keep_pre_restore 1) = %q, %v; want %q", kept, g, err, written)
	}
}

func mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}
