package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/supervisor"
)

// killSupervisorAt runs `hbx ARGS --json`, SIGKILLs the supervisor s as
// soon as hbx printed the event at, and returns hbx's result and how long
// hbx ran after the kill (0 when the event never came).
func killSupervisorAt(t *testing.T, b *box, s *supervised, at string, args ...string) (result, time.Duration) {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"--config", b.config}, append(args, "--json")...)...)
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
	var killed time.Time
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		stdout.WriteString(sc.Text() + "\n")
		var ev struct{ Event string }
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == at && killed.IsZero() {
			if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = time.Now()
		}
	}
	io.Copy(io.Discard, out)
	err = cmd.Wait()
	var after time.Duration
	if !killed.IsZero() {
		after = time.Since(killed)
		<-s.exited
	}
	r := result{stdout: stdout.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r, after
}

// setHealthWait sets backup.health_wait (15s in upgradeBox) to d.
func setHealthWait(t *testing.T, b *box, d string) {
	t.Helper()
	c := readFile(t, b.config)
	n := strings.Replace(c, "  health_wait: 15s\n", "  health_wait: "+d+"\n", 1)
	if n == c {
		t.Fatal("no backup.health_wait: 15s in the config")
	}
	if err := os.WriteFile(b.config, []byte(n), 0o600); err != nil {
		t.Fatal(err)
	}
}

// oneLine checks that hbx exited 1 within limit after the supervisor was
// killed and printed exactly one error line containing every want.
func oneLine(t *testing.T, what string, r result, after, limit time.Duration, want ...string) {
	t.Helper()
	el := errorLines(t, r.stderr)
	t.Logf("%s: exit %d %s after the kill: %q", what, r.code, after.Round(time.Millisecond), el)
	if after == 0 {
		t.Fatalf("%s: the supervisor was never killed\n%s%s", what, r.stdout, r.stderr)
	}
	if r.code != 1 || after > limit {
		t.Errorf("%s: exit %d %s after the supervisor was killed, want 1 within %s", what, r.code, after, limit)
	}
	if len(el) != 1 {
		t.Errorf("%s: %d error lines, want one:\n%s", what, len(el), r.stderr)
		return
	}
	for _, w := range want {
		if !strings.Contains(el[0], w) {
			t.Errorf("%s: the error line does not say %q: %s", what, w, el[0])
		}
	}
}

// TestSupervisorDiesE2E kills the real supervisor (SIGKILL) during each
// wait of an upgrade, a restore and a backup, with backup.health_wait at
// 90s: each command notices at once (its connection to the supervisor
// broke), puts things back or leaves nothing half-done, exits 1 within
// seconds and says in one line what it did; the next hbx supervise runs
// the box as that line says.
func TestSupervisorDiesE2E(t *testing.T) {
	requireE2E(t)
	b, s, v1, v2, _ := upgradeBox(t)
	setHealthWait(t, b, "90s")
	const limit = 15 * time.Second
	big := make([]byte, 64<<20) // so the kill lands while the archive is written
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(b.dataDir, "big.sqlite"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("v1 data"), 0o600)
	again := func() {
		s = startSupervise(t, b, s.socket, s.dir)
		healthyAt(t, b.port, 60*time.Second)
		s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	}
	onV1 := func(what string) {
		t.Helper()
		if ver, img, st := b.activeVersion(), b.configuredImage(), readState(t, b.dataDir); ver != "1.0.0" || img != v1 || st.Format != 1 {
			t.Errorf("%s: active %s, configured %s, data format %d; want 1.0.0 throughout", what, ver, img, st.Format)
		}
		if g := readFile(t, filepath.Join(b.dataDir, "generation")); g != "v1 data" {
			t.Errorf("%s: generation %q, want the v1 data", what, g)
		}
	}
	backups := filepath.Join(b.dir, "backups")

	// 1. The upgrade's hold: killed during the pre-upgrade backup, the
	// upgrade stops before activation.
	r, after := killSupervisorAt(t, b, s, "backing-up", "upgrade", "--image", v2)
	oneLine(t, "upgrade, killed during the pre-upgrade backup", r, after, limit, "supervisor is gone", "stopped before activation", "stays active and configured", "start hbx supervise")
	if strings.Contains(r.stdout, `"activating"`) {
		t.Errorf("the upgrade went on to activate after the supervisor died:\n%s", r.stdout)
	}
	onV1("after the upgrade killed during its backup")
	if aside, _ := filepath.Glob(b.dataDir + ".rolled-back-*"); len(aside) != 0 {
		t.Errorf("data was rolled back although nothing was activated: %q", aside)
	}
	again()
	onV1("after the next hbx supervise")

	// 2. The upgrade's health wait: health.token_file holds a wrong key,
	// so mcp-tools fails; the supervisor is killed once v2 answers
	// /api/health. The upgrade rolls back at once, without a supervisor.
	wrong := filepath.Join(b.dir, "wrong.key")
	writeFile(t, wrong, "not-the-key-"+strings.Repeat("0", 52)+"\n", 0o600)
	appendConfig(t, b, "health:\n  token_file: "+wrong+"\n")
	// --no-rehearsal: the rehearsal's MCP check with the wrong key would
	// refuse v2 before the supervisor is touched, and nothing would be killed.
	cmd := exec.Command(binary(t), "--config", b.config, "upgrade", "--image", v2, "--json", "--no-rehearsal")
	cmd.Env = cleanEnv()
	var errb strings.Builder
	cmd.Stderr = &errb
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	var killed time.Time
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		stdout.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), `"health"`) {
			healthyAt(t, b.port, 60*time.Second)
			for b.activeVersion() != "2.0.0" {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(time.Second) // well into the health checks
			s.cmd.Process.Signal(syscall.SIGKILL)
			killed = time.Now()
		}
	}
	err := cmd.Wait()
	after = time.Since(killed)
	if !killed.IsZero() {
		<-s.exited
	}
	r = result{stdout: stdout.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	}
	if killed.IsZero() {
		after = 0
	}
	oneLine(t, "upgrade, killed during the health wait", r, after, limit, "upgrade: rolled back to ", "supervisor is gone", "kept in", "start hbx supervise", "see hbx logs executor --stderr")
	onV1("after the upgrade killed during its health wait")
	again()
	onV1("after the next hbx supervise")
	if g, _ := os.ReadFile(filepath.Join(b.runtimeDir, "upgrade.json")); !strings.Contains(string(g), `"rolled-back"`) {
		t.Errorf("upgrade.json after the rollback:\n%s", g)
	}
	os.Remove(wrong) // the next steps do not check MCP
	c := readFile(t, b.config)
	writeFile(t, b.config, strings.Replace(c, "health:\n  token_file: "+wrong+"\n", "", 1), 0o600)

	// 3. The restore's health wait: the restore is undone at once.
	rb := b.hbx("backup", "--json")
	if rb.code != 0 {
		t.Fatalf("hbx backup = %d: %s", rb.code, rb.stderr)
	}
	archive := lastJSON(t, rb.stdout)["path"].(string)
	os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("v1 data"), 0o600)
	os.WriteFile(filepath.Join(b.dataDir, "after-the-backup"), []byte("live"), 0o600)
	live := stableFiles(t, b.dataDir)
	r, after = killSupervisorAt(t, b, s, "started", "restore", archive)
	oneLine(t, "restore, killed during the health wait", r, after, limit, "supervisor is gone", "restore undone, the old data is back", "start hbx supervise")
	if got := stableFiles(t, b.dataDir); !sameFiles(got, live) {
		t.Errorf("after the restore killed during its health wait: data %q, want the live data %q", keys(got), keys(live))
	}
	if _, err := os.Stat(b.dataDir + ".restore.json"); err == nil {
		t.Errorf("the restore left its journal although it undid itself")
	}
	again()
	if got := stableFiles(t, b.dataDir); !sameFiles(got, live) {
		t.Errorf("after the next hbx supervise: data %q, want the live data %q", keys(got), keys(live))
	}

	// 4. The backup's hold: killed while the archive is written, the
	// backup stops and leaves no archive.
	before := archivesIn(backups)
	r, after = killSupervisorAt(t, b, s, "stopped", "backup")
	oneLine(t, "backup, killed while the programs are held", r, after, limit, "supervisor is gone", "no archive was written", "programs not running again: executor", "start hbx supervise")
	if got := archivesIn(backups); len(got) != len(before) {
		t.Errorf("backup directory after the killed backup: %q, want %q", got, before)
	}
	again()
}
