package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// inMountNS runs script with sh in a new private mount namespace (unshare
// --mount), with $BIN the hbx under test and $CFG the box's config, and
// returns its combined output and error.
func inMountNS(t *testing.T, b *box, script string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-ec", script)
	cmd.Env = append(append(cleanEnv(), "BIN="+binary(t), "CFG="+b.config), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestDataDirVolumeE2E: the Docker box's volumes (issue 16). A volume
// (here a tmpfs, mode 0755 as a Docker named volume comes up) on the data
// directory's parent: hbx creates the data directory 0700 inside it, and
// Executor runs healthy. A volume on the data directory itself: check
// data-dir fails, naming the mount point, since a restore swaps the data
// directory with a sibling by rename, which cannot move a mount.
func TestDataDirVolumeE2E(t *testing.T) {
	requireE2E(t)
	if out, err := exec.Command("unshare", "--mount", "true").CombinedOutput(); err != nil {
		t.Fatalf("unshare --mount does not work here: %v %s", err, out)
	}
	b := installedBox(t)
	parent := filepath.Dir(b.dataDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}

	out, err := inMountNS(t, b, `mount -t tmpfs -o mode=0755 vol "$PARENT"
test ! -e "$DATA"
"$BIN" --config "$CFG" run executor >"$PARENT/run.log" 2>&1 &
pid=$!
rc=0
"$BIN" --config "$CFG" health --wait 60s --only api-health,data-dir || rc=$?
stat -c 'mode %a' "$DATA"
kill -TERM $pid
wait $pid || true
exit $rc`, "PARENT="+parent, "DATA="+b.dataDir)
	if err != nil || !strings.Contains(out, "pass  data-dir") || !strings.Contains(out, "mode 700") {
		t.Fatalf("run and health with a volume on the data directory's parent: %v\n%s", err, out)
	}

	out, err = inMountNS(t, b, `mkdir -p "$DATA"
mount -t tmpfs -o mode=0700 vol "$DATA"
exec "$BIN" --config "$CFG" health --only data-dir`, "DATA="+b.dataDir)
	if err == nil || !strings.Contains(out, "fail  data-dir") || !strings.Contains(out, b.dataDir+" is a mount point") {
		t.Fatalf("health with a volume on the data directory itself: %v, want data-dir failed naming the mount point\n%s", err, out)
	}
	t.Logf("volume on the data directory: %s", strings.TrimSpace(strings.Split(out, "\n")[0]))
}
