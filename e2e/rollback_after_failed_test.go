package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRollbackAfterSelfRollbackE2E: after a completed upgrade to 2.0.0,
// an upgrade to 2.0.0-sick that fails its health wait rolls itself back
// to 2.0.0 with previous on 1.0.0 again; hbx rollback then undoes the
// completed upgrade (1.0.0 and its pre-upgrade data back, saying the
// last change had rolled itself back), and a second one refuses. Before,
// the first refused with "was rolled back" although previous named
// 1.0.0 and its archive was there.
func TestRollbackAfterSelfRollbackE2E(t *testing.T) {
	requireE2E(t)
	b, _, v1, v2, sick := upgradeBox(t)
	if err := os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("v1 data"), 0o600); err != nil {
		t.Fatal(err)
	}
	pre, preState := stableFiles(t, b.dataDir), readState(t, b.dataDir)
	if r := b.hbx("upgrade", "--image", v2); r.code != 0 {
		t.Fatalf("hbx upgrade to 2.0.0 = %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r := b.hbx("upgrade", "--image", sick, "--no-rehearsal") // past the rehearsal, to the self-rollback
	if el := errorLines(t, r.stderr); r.code != 1 || len(el) != 1 || !strings.HasPrefix(el[0], "hbx: upgrade: rolled back to "+v2+": ") {
		t.Fatalf("hbx upgrade to 2.0.0-sick = %d, error lines %q; want 1, rolled back to %s\n%s", r.code, el, v2, r.stderr)
	}
	if cur, prev := linkVersion(t, b, "current"), linkVersion(t, b, "previous"); cur != "2.0.0" || prev != "1.0.0" {
		t.Fatalf("after the self-rollback: current %s, previous %s; want 2.0.0, 1.0.0", cur, prev)
	}
	r = b.hbx("rollback")
	if r.code != 0 {
		t.Fatalf("hbx rollback after the self-rollback = %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("hbx rollback: %s", strings.TrimSpace(r.stdout))
	if !strings.Contains(r.stdout, "rolled itself back") {
		t.Errorf("hbx rollback does not say the last change rolled itself back:\n%s", r.stdout)
	}
	checkRolledBack(t, b, v1, pre, preState)
	if again := b.hbx("rollback"); again.code == 0 {
		t.Errorf("a second hbx rollback = 0, want a refusal")
	}
}
