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

// TestRestoreRefusesMountPointE2E: a restore onto a data directory that is
// itself a mount point would fail at the swap; it is refused first, in one
// line naming the mount point, with nothing staged beside it.
func TestRestoreRefusesMountPointE2E(t *testing.T) {
	requireE2E(t)
	b := installedBox(t)
	pass := filepath.Join(b.dir, "backup.pass")
	writeFile(t, pass, "correct horse battery staple\n", 0o600)
	appendConfig(t, b, "backup:\n  dir: "+filepath.Join(b.dir, "backups")+"\n  passphrase_file: "+pass+"\n")
	if err := os.MkdirAll(b.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(b.dataDir, "data.db"), "rows\n", 0o600)
	r := b.hbx("backup")
	if r.code != 0 {
		t.Fatalf("hbx backup = %d\n%s", r.code, r.stderr)
	}
	archives, _ := filepath.Glob(filepath.Join(b.dir, "backups", "*.gpg"))
	if len(archives) != 1 {
		t.Fatalf("archives after hbx backup: %v", archives)
	}
	out, err := inMountNS(t, b, `mount -t tmpfs -o mode=0700 vol "$DATA"
rc=0
"$BIN" --config "$CFG" restore "$ARCHIVE" || rc=$?
echo "exit $rc"
ls -a "$(dirname "$DATA")"`, "DATA="+b.dataDir, "ARCHIVE="+archives[0])
	errs := errorLines(t, out)
	if err != nil || !strings.Contains(out, "exit 2") || len(errs) != 1 || !strings.Contains(errs[0], b.dataDir+" is a mount point") {
		t.Fatalf("hbx restore onto a mounted data directory: %v, want exit 2 and one line naming the mount point\n%s", err, out)
	}
	if strings.Contains(out, ".restore-") || strings.Contains(out, ".pre-restore-") {
		t.Errorf("the refused restore left a staging or pre-restore directory:\n%s", out)
	}
	if got := readFile(t, filepath.Join(b.dataDir, "data.db")); got != "rows\n" {
		t.Errorf("data.db = %q after the refused restore", got)
	}
	t.Logf("refused: %s", errs[0])
}
