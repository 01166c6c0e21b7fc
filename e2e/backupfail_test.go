package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/supervisor"
)

// fillerProgram fills the backup directory's filesystem when it is
// stopped while FLAG exists: another process taking the space the backup
// was about to use, after backup's free-space check.
const fillerProgram = `  filler:
    command: [/bin/sh, -c, 'trap "[ -e FLAG ] && dd if=/dev/zero of=BACKUPS/fill bs=1M count=80 2>/dev/null; exit 0" TERM; while :; do sleep 0.1; done']
    priority: 400
`

var allUp = map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running, "filler": supervisor.Running}

// failBox is a backupBox whose backup.dir is a 96 MiB tmpfs, with the
// writer and the filler supervised and 24 MiB of random data.
func failBox(t *testing.T) (*box, *supervised, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "mounting a tmpfs needs root")
	}
	b := installedBox(t)
	backups := filepath.Join(b.dir, "backups")
	if err := os.MkdirAll(backups, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=96m,mode=0700", "tmpfs", backups).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", backups).Run() })
	progs := strings.ReplaceAll(writerProgram, "DATA", b.dataDir) +
		strings.NewReplacer("FLAG", filepath.Join(b.dir, "fill-on-stop"), "BACKUPS", backups).Replace(fillerProgram)
	socket, dir := supervisorConfig(t, b, progs)
	pass := filepath.Join(b.dir, "backup.pass")
	if err := os.WriteFile(pass, []byte("correct horse battery staple\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(b.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "backup:\n  dir: %s\n  passphrase_file: %s\n  health_wait: 60s\n", backups, pass)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 24<<20)
	rand.Read(big)
	if err := os.MkdirAll(b.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.dataDir, "big.sqlite"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(60*time.Second, allUp)
	return b, s, backups
}

// errorLines returns the lines of stderr that main prints for an error
// ("hbx: ..."), warnings left out, and fails the test on a panic.
func errorLines(t *testing.T, stderr string) []string {
	t.Helper()
	if strings.Contains(stderr, "panic:") || strings.Contains(stderr, "goroutine ") {
		t.Fatalf("hbx panicked:\n%s", stderr)
	}
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "hbx: ") && !strings.HasPrefix(l, "hbx: warning: ") {
			out = append(out, l)
		}
	}
	return out
}

// archivesIn lists what is in the backup directory but the filler's file.
func archivesIn(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if e.Name() != "fill" {
			out = append(out, e.Name())
		}
	}
	return out
}

// runWatching runs `hbx backup --json` and calls at for each event as it
// comes (with its path), then returns the result.
func runWatching(t *testing.T, b *box, at func(event, path string)) result {
	t.Helper()
	cmd := exec.Command(binary(t), "--config", b.config, "backup", "--json")
	cmd.Env = cleanEnv()
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		stdout.WriteString(sc.Text() + "\n")
		var ev struct{ Event, Path string }
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			at(ev.Event, ev.Path)
		}
	}
	io.Copy(io.Discard, out)
	err = cmd.Wait()
	r := result{stdout: stdout.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBackupFailuresE2E: every failure of hbx backup after the programs
// were stopped ends in one error line, exit 1, no archive left, and the
// programs running again, named; a successful backup returns only once
// they run and are healthy (hbx backup && hbx health), lists the fifo it
// left out, and the restore lists it too; a supervisor that dies during
// the backup makes it exit 1 saying the programs are not running.
func TestBackupFailuresE2E(t *testing.T) {
	requireE2E(t)
	b, s, backups := failBox(t)
	c := s.client()

	// 1. The disk fills while the archive is written.
	flag := filepath.Join(b.dir, "fill-on-stop")
	os.WriteFile(flag, nil, 0o600)
	r := b.hbx("backup")
	el := errorLines(t, r.stderr)
	if r.code != 1 || len(el) != 1 || !strings.Contains(el[0], "no space left on device") || !strings.Contains(el[0], "partial archive was removed") ||
		!strings.Contains(el[0], "services started again: executor, writer, filler") {
		t.Errorf("hbx backup on a full disk = %d, error lines %q; want 1 and one line: no space, partial archive removed, services started again\n%s", r.code, el, r.stderr)
	}
	if left := archivesIn(backups); len(left) != 0 {
		t.Errorf("left in the backup directory after the full disk: %q", left)
	}
	os.Remove(flag)
	os.Remove(filepath.Join(backups, "fill"))
	s.waitStates(60*time.Second, allUp)

	// 2. A good backup returns once the programs run and are healthy, and
	// lists the fifo it leaves out; hbx health passes at once after it.
	if r := b.hbx("health"); r.code != 0 {
		t.Fatalf("hbx health before the backup = %d: %s%s", r.code, r.stdout, r.stderr)
	}
	fifo := filepath.Join(b.dataDir, "a-pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	r = b.hbx("backup")
	h := b.hbx("health")
	if r.code != 0 || h.code != 0 {
		t.Errorf("hbx backup && hbx health = %d && %d, want 0 && 0\n%s%s\n%s%s", r.code, h.code, r.stdout, r.stderr, h.stdout, h.stderr)
	}
	sts, err := c.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if _, ok := allUp[st.Name]; ok && st.State != supervisor.Running {
			t.Errorf("right after hbx backup: %s is %s, want RUNNING", st.Name, st.State)
		}
	}
	if !strings.Contains(r.stdout, "programs stopped and running again: executor, writer, filler") {
		t.Errorf("hbx backup output does not say the programs run again:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "hbx: warning: not archived: "+fifo+" (fifo)") {
		t.Errorf("hbx backup stderr does not warn about the fifo:\n%s", r.stderr)
	}
	archive := strings.SplitN(r.stdout, "\n", 2)[0]
	rr := b.hbx("restore", archive)
	if rr.code != 0 || !strings.Contains(rr.stdout, `"a-pipe" (fifo)`) {
		t.Errorf("hbx restore = %d, want 0 and the fifo listed as not in the archive\n%s%s", rr.code, rr.stdout, rr.stderr)
	}
	s.waitStates(60*time.Second, allUp)
	for _, n := range archivesIn(backups) {
		os.Remove(filepath.Join(backups, n))
	}

	// 3. A file changes while it is archived: a writer escaped the hold.
	// (It opens the file only for each append, so the busy check rarely
	// sees it; when it does, the backup refuses instead and we retry.)
	escapee := exec.Command("sh", "-c", `while :; do echo x >> "$1"; sleep 0.002; done`, "sh", filepath.Join(b.dataDir, "grow"))
	escapee.Dir = "/"
	if err := escapee.Start(); err != nil {
		t.Fatal(err)
	}
	changed := false
	for try := 0; try < 5 && !changed; try++ {
		r = b.hbx("backup")
		el = errorLines(t, r.stderr)
		if r.code != 1 || len(el) != 1 || !strings.Contains(el[0], "services started again: executor, writer, filler") {
			t.Errorf("hbx backup with a file changing = %d, error lines %q; want 1 and one line naming the services started again", r.code, el)
		}
		// Seen while hashing (nothing written yet) or while writing (the
		// partial archive removed); the directory is checked below.
		changed = len(el) == 1 && strings.Contains(el[0], "changed while being archived")
		s.waitStates(60*time.Second, allUp)
	}
	escapee.Process.Kill()
	escapee.Wait()
	if !changed {
		t.Errorf("no attempt failed with a changed file: %s", r.stderr)
	}
	if left := archivesIn(backups); len(left) != 0 {
		t.Errorf("left in the backup directory after a changed file: %q", left)
	}

	// 4. The read-back check fails: a byte of the archive changes on disk
	// after it was written.
	r = runWatching(t, b, func(ev, p string) {
		if ev != "written" {
			return
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		st, _ := f.Stat()
		one := make([]byte, 1)
		f.ReadAt(one, st.Size()/2)
		one[0] ^= 0xff
		f.WriteAt(one, st.Size()/2)
	})
	el = errorLines(t, r.stderr)
	if r.code != 1 || len(el) != 1 || !strings.Contains(el[0], "verify the written archive") || !strings.Contains(el[0], "archive removed") ||
		!strings.Contains(el[0], "services started again: executor, writer, filler") {
		t.Errorf("hbx backup with a damaged read-back = %d, error lines %q; want 1 and one line\n%s", r.code, el, r.stderr)
	}
	if left := archivesIn(backups); len(left) != 0 {
		t.Errorf("left in the backup directory after a failed read-back: %q", left)
	}
	s.waitStates(60*time.Second, allUp)

	// 5. The supervisor dies while the programs are held: the backup
	// finishes its archive but exits 1 saying the programs do not run.
	r = runWatching(t, b, func(ev, _ string) {
		if ev == "stopped" {
			s.cmd.Process.Kill()
		}
	})
	<-s.exited
	el = errorLines(t, r.stderr)
	if r.code != 1 || len(el) != 1 || !strings.Contains(el[0], "programs not running again: executor, writer, filler") || !strings.Contains(el[0], "supervisor is gone") ||
		strings.Contains(el[0], "died with") || !strings.Contains(el[0], "stopped by the next hbx supervise") {
		t.Errorf("hbx backup with the supervisor killed = %d, error lines %q; want 1 saying the programs are not running again\n%s%s", r.code, el, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, `"started"`) || strings.Contains(r.stdout, "started again") {
		t.Errorf("hbx backup claims the programs started:\n%s", r.stdout)
	}
}

// TestPreUpgradeBackupFailsE2E: hbx upgrade's pre-upgrade backup runs the
// same code as hbx backup; when it fails after the scan (a file changes
// while it is archived) the upgrade ends in one error line, exit 1, no
// archive, the old release active, and the services started again and
// healthy, named. Then the upgrade succeeds.
func TestPreUpgradeBackupFailsE2E(t *testing.T) {
	requireE2E(t)
	b, s, _, v2, _ := upgradeBox(t)
	big := make([]byte, 24<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(b.dataDir, "big.sqlite"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	before := b.current()
	escapee := exec.Command("sh", "-c", `while :; do echo x >> "$1"; sleep 0.002; done`, "sh", filepath.Join(b.dataDir, "grow"))
	escapee.Dir = "/"
	if err := escapee.Start(); err != nil {
		t.Fatal(err)
	}
	changed := false
	var r result
	for try := 0; try < 5 && !changed; try++ {
		r = b.hbx("upgrade", "--image", v2)
		el := errorLines(t, r.stderr)
		if r.code != 1 || len(el) != 1 || !strings.Contains(el[0], "pre-upgrade backup") || !strings.Contains(el[0], "services started again: executor (healthy on") {
			t.Errorf("hbx upgrade with a file changing = %d, error lines %q; want 1 and one line naming the services started again\n%s", r.code, el, r.stderr)
		}
		// Seen while hashing (nothing written yet) or while writing (the
		// partial archive removed); the directory is checked below.
		changed = len(el) == 1 && strings.Contains(el[0], "changed while being archived")
		if got := b.current(); got != before {
			t.Errorf("active release after the failed upgrade = %s, want %s", got, before)
		}
		s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	}
	escapee.Process.Kill()
	escapee.Wait()
	if !changed {
		t.Errorf("no attempt failed with a changed file: %s", r.stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(b.dir, "backups", "*")); len(left) != 0 {
		t.Errorf("left in the backup directory: %q", left)
	}
	if r := b.hbx("upgrade", "--image", v2); r.code != 0 {
		t.Errorf("hbx upgrade after the writer stopped = %d: %s", r.code, r.stderr)
	}
}

// TestRestoreFailureRestartsE2E: a restore that fails after it stopped the
// programs (the runtime the archive names cannot be installed) changes
// nothing, starts the programs again, waits for them and names them.
func TestRestoreFailureRestartsE2E(t *testing.T) {
	requireE2E(t)
	b, s, _ := backupBox(t, "")
	// An archive that names a runtime the registry does not have: made
	// with a config whose executor.image has another digest.
	cfg := readFile(t, b.config)
	i := strings.Index(cfg, "@sha256:")
	if i < 0 {
		t.Fatalf("no digest in the config:\n%s", cfg)
	}
	other := filepath.Join(b.dir, "other.yaml")
	if err := os.WriteFile(other, []byte(cfg[:i+8]+strings.Repeat("0", 64)+cfg[i+8+64:]), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), "--config", other, "backup", "--json")
	cmd.Env = cleanEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hbx backup with the other image: %v\n%s", err, out)
	}
	archive := lastJSON(t, string(out))["path"].(string)
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running})
	before := stableFiles(t, b.dataDir)

	r := b.hbx("restore", archive)
	el := errorLines(t, r.stderr)
	if r.code != 1 || len(el) != 1 || !strings.Contains(el[0], "nothing changed") || !strings.Contains(el[0], "services started again: executor, writer") {
		t.Errorf("hbx restore of an archive whose runtime is missing = %d, error lines %q; want 1 and one line: nothing changed, services started again\n%s", r.code, el, r.stderr)
	}
	sts, err := s.client().Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if (st.Name == "executor" || st.Name == "writer") && st.State != supervisor.Running {
			t.Errorf("right after the failed restore: %s is %s, want RUNNING", st.Name, st.State)
		}
	}
	if after := stableFiles(t, b.dataDir); !sameFiles(after, before) {
		t.Errorf("data after the failed restore %q, want %q", keys(after), keys(before))
	}
}
