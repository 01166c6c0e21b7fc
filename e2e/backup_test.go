package e2e

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/supervisor"
)

// writerProgram is a supervised program that writes into the data
// directory all the time: pair.a then pair.b with the same counter, the
// way a database writes a record and its index. On SIGTERM it finishes the
// pair it is writing, like a database shutting down cleanly; a backup
// taken while it runs could see pair.a ahead of pair.b.
const writerProgram = `  writer:
    command: [/bin/sh, -c, 'trap "stop=1" TERM; i=0; while [ -z "$stop" ]; do i=$((i+1)); echo $i > DATA/pair.a; echo $i > DATA/pair.b; done']
    depends_on: [executor]
    priority: 300
`

// backupBox is an installed box under hbx supervise, Executor healthy, with
// the writer running and backup settings in its config.
func backupBox(t *testing.T, extraBackup string) (*box, *supervised, string) {
	t.Helper()
	b := installedBox(t)
	socket, dir := supervisorConfig(t, b, strings.ReplaceAll(writerProgram, "DATA", b.dataDir))
	pass := filepath.Join(b.dir, "backup.pass")
	if err := os.WriteFile(pass, []byte("correct horse battery staple\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(b.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "backup:\n  dir: %s\n  passphrase_file: %s\n  health_wait: %s\n%s", filepath.Join(b.dir, "backups"), pass, slow(t, 30*time.Second), extraBackup)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	s := startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running})
	return b, s, filepath.Join(b.dir, "backups")
}

// result is the last JSON line of a --json run.
func lastJSON(t *testing.T, out string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
		t.Fatalf("last line of %q: %v", out, err)
	}
	return m
}

// events lists the event names of a --json run, result excluded.
func events(out string) []string {
	var evs []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev struct{ Event string }
		if json.Unmarshal([]byte(l), &ev) == nil && ev.Event != "result" {
			evs = append(evs, ev.Event)
		}
	}
	return evs
}

// tarFiles reads a plain .tar.gz into name -> content for regular files.
func tarFiles(t *testing.T, p string) map[string]string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			out[h.Name] = string(b)
		}
	}
}

// stableFiles reads the files of dir that no program rewrites (the
// writer's pair and Executor's state.json are left out), name -> content.
func stableFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		switch rel {
		case "pair.a", "pair.b", "state.json":
			return nil
		}
		if strings.HasSuffix(rel, ".tmp-"+rel) || strings.Contains(rel, ".tmp-") {
			return nil
		}
		b, _ := os.ReadFile(p)
		out[rel] = string(b)
		return nil
	})
	return out
}

func sameFiles(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The backup and restore lifecycle, one top-level test per proof, each on
// a box of its own (backupBox), so make e2e's shards balance. Only
// TestBackupRestoreE2E is in the arm64 suite (the Makefile's
// E2E_ARM64_TESTS): it is what depends on the architecture, the arm64
// binary's own archive round trip (its OpenPGP, gzip and SHA-256, whose
// assembly differs per architecture) and the arm64 Bun starting again on
// restored data. The others prove logic that is the same code on every
// architecture (when the services stop, what a restore does without a
// runtime, what it undoes), each with Bun restarting once or twice: 20 to
// 60 s each under qemu-user, so they run natively only (see
// docs/development.md, "ARM64 under emulation").

// TestBackupRestoreE2E: hbx backup and hbx restore on a box where
// Executor (the real Bun) and a writer run under hbx supervise: an
// encrypted backup taken while the writer writes, listed and verified,
// then restored over changed data, Executor healthy on it.
func TestBackupRestoreE2E(t *testing.T) {
	requireE2E(t)
	b, s, _ := backupBox(t, "")
	if err := os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A backup while the writer writes: the services are stopped, the
	// archive is consistent, the services come back.
	r := b.hbx("backup", "--json")
	if r.code != 0 {
		t.Fatalf("hbx backup = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	res := lastJSON(t, r.stdout)
	archive := res["path"].(string)
	if got, want := strings.Join(events(r.stdout), ","), "locked,stopped,scanned,written,started,verified"; got != want {
		t.Errorf("backup events = %s, want %s", got, want)
	}
	if rs, _ := res["restarted"].([]any); len(rs) != 2 {
		t.Errorf("restarted = %v, want executor and writer", res["restarted"])
	}
	if st, err := os.Stat(archive); err != nil || st.Mode().Perm() != 0o600 || !strings.HasSuffix(archive, ".tar.gz.gpg") {
		t.Errorf("archive %s: %v %v, want mode 0600 .tar.gz.gpg", archive, err, st)
	}
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running})
	healthyAt(t, b.port, 30*time.Second)

	// One archive: the list is its header line and the archive's.
	if r := b.hbx("backup", "list"); r.code != 0 || strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stdout, filepath.Base(archive)) {
		t.Errorf("hbx backup list = %d\n%s%s", r.code, r.stdout, r.stderr)
	} else if jr := b.hbx("backup", "list", "--json"); jr.code != 0 {
		t.Errorf("hbx backup list --json = %d\n%s%s", jr.code, jr.stdout, jr.stderr)
	} else {
		// Its IMAGE DIGEST is the index's, as executor.image pins it.
		var listed []map[string]any
		if err := json.Unmarshal([]byte(jr.stdout), &listed); err != nil || len(listed) != 1 {
			t.Fatalf("hbx backup list --json: %v\n%s", err, jr.stdout)
		}
		if index, _ := listed[0]["index_digest"].(string); !strings.HasPrefix(index, "sha256:") || !strings.Contains(r.stdout, index) || !strings.Contains(readFile(t, b.config), index) {
			t.Errorf("hbx backup list's IMAGE DIGEST: want the archive's index digest %q, the one executor.image pins:\n%s", index, r.stdout)
		}
	}
	if r := b.hbx("backup", "verify", archive); r.code != 0 || !strings.Contains(r.stdout, "every entry matches the manifest") {
		t.Errorf("hbx backup verify = %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Restore the archive over changed data.
	os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("second"), 0o600)
	os.WriteFile(filepath.Join(b.dataDir, "after-backup"), []byte("x"), 0o600)
	r = b.hbx("restore", "--json", archive)
	if r.code != 0 {
		t.Fatalf("hbx restore = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got, want := strings.Join(events(r.stdout), ","), "locked,extracted,stopped,runtime,swapped,started,healthy,committed"; got != want {
		t.Errorf("restore events = %s, want %s", got, want)
	}
	if got, _ := os.ReadFile(filepath.Join(b.dataDir, "generation")); string(got) != "first" {
		t.Errorf("generation after restore = %q, want first", got)
	}
	if _, err := os.Stat(filepath.Join(b.dataDir, "after-backup")); !os.IsNotExist(err) {
		t.Errorf("after-backup survived the restore: %v", err)
	}
	old := lastJSON(t, r.stdout)["restored"].(map[string]any)[b.dataDir].(string)
	if got, _ := os.ReadFile(filepath.Join(old, "generation")); string(got) != "second" {
		t.Errorf("pre-restore copy %s holds generation %q, want second", old, got)
	}
	if st, _ := os.Stat(b.dataDir); st.Mode().Perm() != 0o700 {
		t.Errorf("data directory mode %v, want 0700", st.Mode().Perm())
	}
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running})
	healthyAt(t, b.port, 10*time.Second)
}

// TestBackupWhileWritingE2E: backups taken again and again while the
// writer writes are never torn (the services are stopped before the data
// is read) and hold every file; --no-encrypt warns. Native only (see
// above).
func TestBackupWhileWritingE2E(t *testing.T) {
	requireE2E(t)
	b, s, _ := backupBox(t, "")
	for i := range 3 {
		r := b.hbx("backup", "--no-encrypt", "--json")
		if r.code != 0 || !strings.Contains(r.stderr, "warning: --no-encrypt") {
			t.Fatalf("hbx backup --no-encrypt = %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		files := tarFiles(t, lastJSON(t, r.stdout)["path"].(string))
		if files["./pair.a"] == "" || files["./pair.a"] != files["./pair.b"] || files["./state.json"] == "" || files["./api-key"] == "" {
			t.Errorf("backup %d taken while the writer ran is torn or incomplete: pair.a %q, pair.b %q, files %q", i, files["./pair.a"], files["./pair.b"], keys(files))
		}
		s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running})
	}
	// Three archives: the list is its header line and theirs.
	if r := b.hbx("backup", "list"); r.code != 0 || strings.Count(r.stdout, "\n") != 4 {
		t.Errorf("hbx backup list = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestRestoreRepullsRuntimeE2E: the runtime is gone (a fresh box from an
// old snapshot, a wiped runtime directory): hbx restore re-pulls it from
// the registry and the services come back healthy on the restored data.
// Native only (see above).
func TestRestoreRepullsRuntimeE2E(t *testing.T) {
	requireE2E(t)
	b, s, _ := backupBox(t, "")
	r := b.hbx("backup", "--json")
	if r.code != 0 {
		t.Fatalf("hbx backup = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	archive := lastJSON(t, r.stdout)["path"].(string)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running})
	for _, p := range []string{"current", "previous", "releases"} {
		os.RemoveAll(filepath.Join(b.runtimeDir, p))
	}
	r = b.hbx("restore", "--json", archive)
	if r.code != 0 || lastJSON(t, r.stdout)["runtime_changed"] != true || lastJSON(t, r.stdout)["healthy"] != true {
		t.Fatalf("hbx restore without a runtime = %d, want the runtime re-pulled and the services healthy\n%s%s", r.code, r.stdout, r.stderr)
	}
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running})
}

// TestBackupRefusesDataHolderE2E: a process the supervisor does not run
// holds a file in the data directory: the backup refuses after stopping
// the services, naming it, and starts them again, saying so. Native only
// (see above).
func TestBackupRefusesDataHolderE2E(t *testing.T) {
	requireE2E(t)
	b, s, _ := backupBox(t, "")
	if err := os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	squatter := exec.Command("sh", "-c", "exec 3<generation; exec sleep 60")
	squatter.Dir = b.dataDir
	if err := squatter.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	r := b.hbx("backup")
	squatter.Process.Kill()
	squatter.Wait()
	if r.code != 1 || !strings.Contains(r.stderr, fmt.Sprintf("pid %d (sleep) holds", squatter.Process.Pid)) || !strings.Contains(r.stderr, "services started again: executor, writer") {
		t.Errorf("hbx backup with a squatter = %d, want 1 naming it and the services started again\n%s", r.code, r.stderr)
	}
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running})
}

// TestRestoreUndoneOnRefusedDataE2E: data Executor cannot run on (written
// by a newer release): the restore puts the old data back and restarts
// the services. The archive is a plain tar.gz as an old box would have
// made. Native only (see above).
func TestRestoreUndoneOnRefusedDataE2E(t *testing.T) {
	requireE2E(t)
	b, s, _ := backupBox(t, "")
	if err := os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(b.dir, "newer")
	os.MkdirAll(bad, 0o700)
	os.WriteFile(filepath.Join(bad, "state.json"), []byte(`{"format":99,"version":"9.9.9","starts":1}`+"\n"), 0o600)
	os.WriteFile(filepath.Join(bad, "api-key"), []byte("k\n"), 0o600)
	os.WriteFile(filepath.Join(bad, "generation"), []byte("newer"), 0o600)
	badArchive := filepath.Join(b.dir, "newer.tar.gz")
	if out, err := exec.Command("sh", "-c", `tar -czf "$1" -C "$2" .`, "sh", badArchive, bad).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	before := stableFiles(t, b.dataDir)
	r := b.hbx("restore", badArchive)
	if r.code != 1 || !strings.Contains(r.stderr, "services did not become healthy") || !strings.Contains(r.stderr, "the old data is back and the services are healthy again") {
		t.Errorf("hbx restore of data Executor refuses = %d, want 1 and the old data back\n%s%s", r.code, r.stdout, r.stderr)
	}
	if after := stableFiles(t, b.dataDir); !sameFiles(after, before) {
		t.Errorf("data after the undone restore %q, want %q", keys(after), keys(before))
	}
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running})
	healthyAt(t, b.port, 10*time.Second)
	if left, _ := filepath.Glob(b.dataDir + ".restore*"); len(left) != 0 {
		t.Errorf("left beside the data directory: %q", left)
	}
}

// killedAt runs `hbx ARGS --json` and SIGKILLs it as soon as it printed
// its k-th (0-based) event. It returns the event, "" when hbx finished
// first.
func killedAt(t *testing.T, b *box, k int, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"--config", b.config}, append(args, "--json")...)...)
	cmd.Env = cleanEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	n, at := 0, ""
	for sc.Scan() {
		var ev struct{ Event string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Event == "result" {
			continue
		}
		if n == k {
			cmd.Process.Signal(syscall.SIGKILL)
			at = ev.Event
			break
		}
		n++
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	cmd.Wait()
	return at
}

// TestKillDuringBackupE2E kills hbx backup at every step: no file ever
// has an archive's name unless it is complete, the supervisor starts the
// services again, and the next backup succeeds and cleans up.
func TestKillDuringBackupE2E(t *testing.T) {
	requireE2E(t)
	b, s, backups := backupBox(t, "")
	big := make([]byte, 32<<20) // so a kill after "scanned" lands mid-write
	rand.Read(big)
	os.WriteFile(filepath.Join(b.dataDir, "big.sqlite"), big, 0o600)
	kills := 0
	for k := 0; ; k++ {
		at := killedAt(t, b, k, "backup")
		if at == "" {
			break
		}
		kills++
		ents, _ := os.ReadDir(backups)
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, ".tmp-") || strings.HasSuffix(n, ".sha256") || strings.HasSuffix(n, ".json") {
				continue
			}
			if r := b.hbx("backup", "verify", filepath.Join(backups, n)); r.code != 0 {
				t.Errorf("killed at %s: %s has an archive's name but does not verify: %s", at, n, r.stderr)
			}
		}
		s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running})
		t.Logf("killed at %s: services running again", at)
	}
	if kills < 5 {
		t.Errorf("only %d kill points", kills)
	}
	// The next supervisor start runs them too.
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
	s2 := startSupervise(t, b, s.socket, s.dir)
	s2.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running})
	if r := b.hbx("backup"); r.code != 0 {
		t.Fatalf("backup after the kills = %d: %s", r.code, r.stderr)
	}
	if tmp, _ := filepath.Glob(filepath.Join(backups, ".tmp-*")); len(tmp) != 0 {
		t.Errorf("temporary files left after a good backup: %q", tmp)
	}
}

// TestKillDuringRestoreE2E kills hbx restore at every step: the data
// directory is always entirely the old tree or entirely the restored one;
// the next hbx supervise start undoes an unconfirmed restore or finishes a
// confirmed one, and a new restore succeeds.
func TestKillDuringRestoreE2E(t *testing.T) {
	requireE2E(t)
	defer holdRecovery(t)() // the next hbx supervise recovers, not the running one
	b, s, _ := backupBox(t, "")
	os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("archived"), 0o600)
	os.MkdirAll(filepath.Join(b.dataDir, "many"), 0o700)
	for i := range 300 {
		os.WriteFile(filepath.Join(b.dataDir, "many", fmt.Sprint(i)), []byte(fmt.Sprint("archived ", i)), 0o600)
	}
	r := b.hbx("backup", "--json")
	if r.code != 0 {
		t.Fatalf("hbx backup = %d: %s", r.code, r.stderr)
	}
	archive := lastJSON(t, r.stdout)["path"].(string)
	newTree := stableFiles(t, b.dataDir)
	setOld := func() map[string]string {
		os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("live"), 0o600)
		for i := range 300 {
			os.WriteFile(filepath.Join(b.dataDir, "many", fmt.Sprint(i)), []byte(fmt.Sprint("live ", i)), 0o600)
		}
		os.WriteFile(filepath.Join(b.dataDir, "live-only"), []byte("x"), 0o600)
		return stableFiles(t, b.dataDir)
	}
	kills := 0
	for k := 0; ; k++ {
		oldTree := setOld()
		at := killedAt(t, b, k, "restore", archive)
		if at == "" {
			break
		}
		kills++
		now := stableFiles(t, b.dataDir)
		isOld, isNew := sameFiles(now, oldTree), sameFiles(now, newTree)
		if !isOld && !isNew {
			t.Fatalf("killed at %s: the data directory is mixed: %q", at, keys(now))
		}
		// Restart the supervisor: it recovers before starting programs.
		s.cmd.Process.Signal(syscall.SIGTERM)
		<-s.exited
		s = startSupervise(t, b, s.socket, s.dir)
		s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "writer": supervisor.Running})
		after := stableFiles(t, b.dataDir)
		switch at {
		case "committed":
			if !sameFiles(after, newTree) {
				t.Errorf("killed at %s: after recovery %q, want the restored tree", at, keys(after))
			}
		case "healthy": // before or after the commit
			if !sameFiles(after, newTree) && !sameFiles(after, oldTree) {
				t.Errorf("killed at %s: after recovery the data is mixed", at)
			}
		default:
			if !sameFiles(after, oldTree) {
				t.Errorf("killed at %s: after recovery %q, want the old tree back", at, keys(after))
			}
		}
		if left, _ := filepath.Glob(b.dataDir + ".restore*"); len(left) != 0 {
			t.Errorf("killed at %s: left after recovery: %q", at, left)
		}
		t.Logf("killed at %s: data %s, recovered", at, map[bool]string{true: "old", false: "new"}[isOld])
	}
	if kills < 6 {
		t.Errorf("only %d kill points", kills)
	}
	if got := stableFiles(t, b.dataDir); !sameFiles(got, newTree) {
		t.Errorf("after the uninterrupted restore: %q, want the archive's tree", keys(got))
	}
}
