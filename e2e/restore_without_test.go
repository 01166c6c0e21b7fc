package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
	"github.com/hermesbox/hbx/supervisor"
)

// front is the registry as the box reaches it: a reverse proxy on a fixed
// address in front of the real registry, which a test can take away
// (connection refused, as a stopped registry or a box without network)
// and bring back at the same address.
type front struct {
	t        *testing.T
	host     string // 127.0.0.1:port
	upstream *url.URL
	srv      *http.Server
}

func newFront(t *testing.T, upstreamHost string) *front {
	t.Helper()
	f := &front{t: t, upstream: &url.URL{Scheme: "http", Host: upstreamHost}}
	// A reserved port: stop and start leave it unbound a while, and no
	// other test (nor a shard of make e2e) may take it meanwhile.
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))))
	if err != nil {
		t.Fatal(err)
	}
	f.host = l.Addr().String()
	f.serve(l)
	t.Cleanup(f.stop)
	return f
}

func (f *front) serve(l net.Listener) {
	f.srv = &http.Server{Handler: httputil.NewSingleHostReverseProxy(f.upstream), ReadHeaderTimeout: 10 * time.Second}
	go f.srv.Serve(l)
}

// stop takes the registry away: connections to host are refused.
func (f *front) stop() {
	if f.srv != nil {
		f.srv.Close()
		f.srv = nil
	}
}

// start brings the registry back at the same address.
func (f *front) start() {
	f.t.Helper()
	var l net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if l, err = net.Listen("tcp", f.host); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		f.t.Fatalf("listen on %s again: %v", f.host, err)
	}
	f.serve(l)
}

// frontBox is an installed box for ref, reached through f, with backup
// settings and a supervisor configuration running only Executor (not
// started).
func frontBox(t *testing.T, reg *testenv.Registry, f *front, ref string) (b *box, socket, dir string) {
	t.Helper()
	b = newBox(t, reg, ref, nil, "")
	writeFile(t, b.config, strings.ReplaceAll(readFile(t, b.config), reg.Host(), f.host), 0o600)
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install = %d\n%s", r.code, r.stderr)
	}
	socket, dir = supervisorConfig(t, b, "")
	pass := filepath.Join(b.dir, "backup.pass")
	writeFile(t, pass, "correct horse battery staple\n", 0o600)
	fh, err := os.OpenFile(b.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(fh, "backup:\n  dir: %s\n  passphrase_file: %s\n  health_wait: 30s\n", filepath.Join(b.dir, "backups"), pass)
	fh.Close()
	must(t, os.MkdirAll(b.dataDir, 0o700))
	return b, socket, dir
}

// archiveOf writes files into b's data directory, backs it up and returns
// the archive.
func archiveOf(t *testing.T, b *box, files map[string][]byte) string {
	t.Helper()
	for n, c := range files {
		writeFile(t, filepath.Join(b.dataDir, n), string(c), 0o600)
	}
	r := b.hbx("backup", "--json")
	if r.code != 0 {
		t.Fatalf("hbx backup = %d: %s", r.code, r.stderr)
	}
	return lastJSON(t, r.stdout)["path"].(string)
}

// withoutRuntimeBox is an installed box reaching the registry through a
// front (frontBox); secret.key and data.db hold known bytes and an archive
// of them is made. The data is changed after the archive.
func withoutRuntimeBox(t *testing.T) (b *box, f *front, ref, archive, socket, dir string, archived map[string][]byte) {
	t.Helper()
	reg, _, ref0 := pushed(t)
	f = newFront(t, reg.Host())
	ref = strings.Replace(ref0, reg.Host(), f.host, 1)
	b, socket, dir = frontBox(t, reg, f, ref)
	archived = map[string][]byte{"secret.key": tartest.PseudoRandom(32, 1), "data.db": tartest.PseudoRandom(1<<20, 2)}
	archive = archiveOf(t, b, archived)
	writeFile(t, filepath.Join(b.dataDir, "data.db"), "rows written after the backup\n", 0o600)
	return b, f, ref, archive, socket, dir, archived
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// sameData fails unless the data directory's files in want hold want's
// bytes.
func sameData(t *testing.T, b *box, what string, want map[string][]byte) {
	t.Helper()
	for n, c := range want {
		got, err := os.ReadFile(filepath.Join(b.dataDir, n))
		if err != nil || !bytes.Equal(got, c) {
			t.Errorf("%s: %s holds %d bytes (%v), want the archive's %d", what, n, len(got), err, len(c))
		}
	}
}

// restoreJournal is the restore journal's phase and awaited image, "" when
// there is none.
func restoreJournal(t *testing.T, b *box) (phase, awaiting string) {
	t.Helper()
	raw, err := os.ReadFile(b.dataDir + ".restore.json")
	if errors.Is(err, os.ErrNotExist) {
		return "", ""
	}
	must(t, err)
	var j struct {
		Phase    string
		Awaiting *struct{ Image string }
	}
	must(t, json.Unmarshal(raw, &j))
	if j.Awaiting != nil {
		awaiting = j.Awaiting.Image
	}
	return j.Phase, awaiting
}

// TestRestoreWithoutRuntimeE2E is issue 17's "restore without a runtime" on
// the real registry: the runtime directory wiped and the registry away,
// hbx restore puts the data back with nothing started and says what to run;
// hbx supervise refuses naming the image and undoes nothing; with the
// registry back, hbx install then hbx supervise come up healthy on the
// restored bytes and the journal is gone.
func TestRestoreWithoutRuntimeE2E(t *testing.T) {
	requireE2E(t)
	b, f, ref, archive, socket, dir, archived := withoutRuntimeBox(t)
	must(t, os.RemoveAll(b.runtimeDir))
	f.stop()

	r := b.hbx("restore", archive)
	if r.code != 3 || !strings.Contains(r.stderr, "not started") {
		t.Fatalf("hbx restore with no runtime and no registry = %d\n%s%s; want 3 (done, not running)", r.code, r.stdout, r.stderr)
	}
	t.Logf("hbx restore:\n%s", r.stdout)
	for _, want := range []string{"NOT started", ref, "hbx install --from FILE", "hbx supervise"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("hbx restore output lacks %q:\n%s", want, r.stdout)
		}
	}
	sameData(t, b, "after hbx restore", archived)
	if ph, img := restoreJournal(t, b); ph != "not-started" || img != ref {
		t.Errorf("journal after hbx restore: phase %q awaiting %q; want not-started, %s", ph, img, ref)
	}
	// hbx status, no supervisor: exit 3, one line naming the image.
	if st := b.hbx("status"); st.code != 3 || !strings.Contains(st.stderr, ref) || strings.Count(strings.TrimSpace(st.stderr), "\n") != 0 {
		t.Errorf("hbx status on data awaiting its runtime, no supervisor = %d: %s%s; want 3 and one line naming %s", st.code, st.stdout, st.stderr, ref)
	}

	// hbx supervise refuses, naming the image, and undoes nothing.
	s := startSupervise(t, b, socket, dir)
	select {
	case err := <-s.exited:
		log := readFile(t, s.log)
		t.Logf("hbx supervise: %v\n%s", err, log)
		if err == nil || !strings.Contains(log, ref) || !strings.Contains(log, "hbx install") {
			t.Errorf("hbx supervise = %v, log:\n%s\nwant a refusal naming %s and hbx install", err, log, ref)
		}
	case <-time.After(slow(t, 60*time.Second)):
		t.Fatalf("hbx supervise did not refuse to start on data waiting for its runtime")
	}
	sameData(t, b, "after the refused hbx supervise", archived)
	if ph, _ := restoreJournal(t, b); ph != "not-started" {
		t.Errorf("journal after the refused hbx supervise: phase %q, want not-started", ph)
	}
	if r := b.hbx("run", "executor"); r.code == 0 || !strings.Contains(r.stderr, ref) {
		t.Errorf("hbx run executor = %d: %s; want a refusal naming %s", r.code, r.stderr, ref)
	}

	// The registry back: hbx install, then hbx supervise, healthy on the
	// restored bytes; the restore is finished.
	f.start()
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install with the registry back = %d\n%s", r.code, r.stderr)
	}
	s = startSupervise(t, b, socket, dir)
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

// TestKillDuringRestoreWithoutRuntimeE2E kills hbx restore at each event of
// the new path (no runtime, no registry): the journal stays readable and
// the data wholly old or wholly the archive's, and the next hbx restore
// recovers (undoing an unconfirmed one) and ends "restored, not started"
// with the archive's bytes.
func TestKillDuringRestoreWithoutRuntimeE2E(t *testing.T) {
	requireE2E(t)
	b, f, ref, archive, _, _, archived := withoutRuntimeBox(t)
	must(t, os.RemoveAll(b.runtimeDir))
	f.stop()
	live := readFile(t, filepath.Join(b.dataDir, "data.db"))
	for _, ev := range []string{"extracted", "stopped", "swapped", "not-started"} {
		if at := killedOn(t, b, ev, "restore", archive); at != ev {
			t.Fatalf("hbx restore finished before the event %q", ev)
		}
		ph, _ := restoreJournal(t, b)
		db := readFile(t, filepath.Join(b.dataDir, "data.db"))
		switch {
		case ph == "not-started":
			sameData(t, b, "killed at "+ev+", not started", archived)
		case ph == "staging" || ph == "swapping":
			if db != live && db != string(archived["data.db"]) {
				t.Errorf("killed at %s (phase %s): data.db is neither the live one nor the archive's", ev, ph)
			}
		default:
			t.Errorf("killed at %s: journal phase %q", ev, ph)
		}
		r := b.hbx("restore", archive)
		if r.code != 3 {
			t.Fatalf("hbx restore after the kill at %s = %d\n%s%s", ev, r.code, r.stdout, r.stderr)
		}
		if ph, img := restoreJournal(t, b); ph != "not-started" || img != ref {
			t.Errorf("after the kill at %s and hbx restore: journal %q awaiting %q", ev, ph, img)
		}
		sameData(t, b, "after the kill at "+ev+" and hbx restore", archived)
		// Back to the live data for the next round.
		writeFile(t, filepath.Join(b.dataDir, "data.db"), live, 0o600)
		for _, e := range archivesIn(filepath.Dir(b.dataDir)) {
			if strings.Contains(e, ".restore-") {
				t.Errorf("after the kill at %s and hbx restore: staging %s left", ev, e)
			}
		}
	}
}

// TestRestoreWithoutRuntimeInstallOnStartE2E: with executor.install_on_start,
// the first hbx supervise after a restore done without its runtime installs
// the archive's release (registry back) and comes up healthy on the
// restored bytes; another image configured meanwhile is refused by hbx
// install, naming the one needed.
func TestRestoreWithoutRuntimeInstallOnStartE2E(t *testing.T) {
	requireE2E(t)
	b, f, ref, archive, socket, dir, archived := withoutRuntimeBox(t)
	must(t, os.RemoveAll(b.runtimeDir))
	f.stop()
	if r := b.hbx("restore", archive); r.code != 3 {
		t.Fatalf("hbx restore = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	cfg := readFile(t, b.config)
	// The registry still away: hbx supervise with install_on_start cannot
	// install it and refuses, saying it starts nothing (not "anyway").
	writeFile(t, b.config, strings.Replace(cfg, "executor:\n", "executor:\n  install_on_start: true\n", 1), 0o600)
	s := startSupervise(t, b, socket, dir)
	select {
	case err := <-s.exited:
		log := readFile(t, s.log)
		if err == nil || !strings.Contains(log, "not starting the programs") || strings.Contains(log, "starting the programs anyway") || !strings.Contains(log, ref) {
			t.Errorf("hbx supervise with install_on_start, registry away = %v, log:\n%s\nwant a refusal naming %s that says it starts nothing", err, log, ref)
		}
	case <-time.After(slow(t, 120*time.Second)):
		t.Fatalf("hbx supervise with install_on_start did not refuse while the registry is away")
	}
	if ph, _ := restoreJournal(t, b); ph != "not-started" {
		t.Errorf("journal after the refused hbx supervise: phase %q, want not-started", ph)
	}
	writeFile(t, b.config, cfg, 0o600)
	f.start()
	// Another release may not be installed on the data.
	other := ref[:strings.Index(ref, "@")] + "@sha256:" + strings.Repeat("0", 64)
	writeFile(t, b.config, strings.Replace(cfg, ref, other, 1), 0o600)
	if r := b.hbx("install"); r.code == 0 || !strings.Contains(r.stderr, ref) {
		t.Errorf("hbx install of another image = %d: %s; want a refusal naming %s", r.code, r.stderr, ref)
	}
	writeFile(t, b.config, strings.Replace(cfg, "executor:\n", "executor:\n  install_on_start: true\n", 1), 0o600)
	s = startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 90*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	sameData(t, b, "under hbx supervise with install_on_start", archived)
	if ph, _ := restoreJournal(t, b); ph != "" {
		t.Errorf("restore journal in phase %q under a healthy hbx supervise", ph)
	}
}

// TestRestoreWithoutRuntimeSupervisedE2E: under a running hbx supervise on
// 1.0.0, an archive written by 2.0.0 with the registry away is refused
// (undone, Executor healthy again, the error names --without-runtime);
// with --without-runtime the data comes back, Executor does not run on it
// and hbx status exits 3 naming 2.0.0; with the registry back, hbx install
// installs 2.0.0 (the pin the restore wrote) and the running supervisor
// starts Executor on the restored bytes and finishes the restore.
func TestRestoreWithoutRuntimeSupervisedE2E(t *testing.T) {
	requireE2E(t)
	reg, _, ref1 := pushed(t)
	f := newFront(t, reg.Host())
	v1 := strings.Replace(ref1, reg.Host(), f.host, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := testimage.Push(ctx, versionImage(t, "2.0.0").Dir, reg.Host()+"/rhyssullivan/executor-selfhost:v2.0.0")
	must(t, err)
	v2 := f.host + "/rhyssullivan/executor-selfhost:v2.0.0@" + d.String()
	a, _, _ := frontBox(t, reg, f, v2)
	archived := map[string][]byte{"secret.key": tartest.PseudoRandom(32, 3), "data.db": tartest.PseudoRandom(1<<20, 4)}
	archive := archiveOf(t, a, archived)

	b, socket, dir := frontBox(t, reg, f, v1)
	live := map[string][]byte{"data.db": []byte("1.0.0's live rows\n")}
	writeFile(t, filepath.Join(b.dataDir, "data.db"), string(live["data.db"]), 0o600)
	s := startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	f.stop()

	r := b.hbx("restore", archive)
	if r.code == 0 || !strings.Contains(r.stderr, "--without-runtime") || !strings.Contains(r.stderr, "restore undone") {
		t.Fatalf("hbx restore over a running 1.0.0 with the registry away = %d: %s; want it undone, naming --without-runtime", r.code, r.stderr)
	}
	sameData(t, b, "after the refused restore", live)
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})

	r = b.hbx("restore", "--without-runtime", archive)
	if r.code != 3 || !strings.Contains(r.stdout, "NOT started") || !strings.Contains(r.stdout, v2) {
		t.Fatalf("hbx restore --without-runtime = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	sameData(t, b, "after hbx restore --without-runtime", archived)
	if st := b.hbx("status"); st.code != 3 || !strings.Contains(st.stdout+st.stderr, v2) {
		t.Errorf("hbx status = %d: %s%s; want exit 3 naming %s", st.code, st.stdout, st.stderr, v2)
	} else if n := strings.Count(st.stdout+st.stderr, "is not installed: install it"); n != 1 || !strings.Contains(st.stdout, "awaits runtime "+v2) {
		t.Errorf("hbx status:\n%s%s\nsays what to do %d times, want once, the FATAL line short (awaits runtime %s)", st.stdout, st.stderr, n, v2)
	} else {
		t.Logf("hbx status:\n%s%s", st.stdout, st.stderr)
	}
	// Executor never runs 1.0.0 on 2.0.0's data.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if st, err := s.client().Status(context.Background()); err == nil && len(st) > 0 && st[0].State == supervisor.Running {
			t.Fatalf("executor %s on data waiting for 2.0.0", st[0].State)
		}
	}

	f.start()
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install with the registry back = %d\n%s", r.code, r.stderr)
	}
	healthyAt(t, b.port, 90*time.Second)
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	sameData(t, b, "on 2.0.0 under the running supervisor", archived)
	deadline := time.Now().Add(slow(t, 30*time.Second))
	for ph, _ := restoreJournal(t, b); ph != ""; ph, _ = restoreJournal(t, b) {
		if time.Now().After(deadline) {
			t.Fatalf("restore journal still in phase %q under a healthy supervisor", ph)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := b.activeVersion(); got != "2.0.0" {
		t.Errorf("active version %q, want 2.0.0", got)
	}
}

// TestRestorePlainTarWithoutRuntimeE2E is issue 17's first example: a
// plain `tar -czf` of the data restored on a box with no runtime and no
// registry. The data comes back with nothing started (exit 3) and waits
// for the configured release; with the registry back, hbx install then
// hbx supervise come up healthy on it and finish the restore.
func TestRestorePlainTarWithoutRuntimeE2E(t *testing.T) {
	requireE2E(t)
	b, f, ref, _, socket, dir, _ := withoutRuntimeBox(t)
	archived := map[string][]byte{"secret.key": tartest.PseudoRandom(32, 3), "data.db": tartest.PseudoRandom(1<<20, 4)}
	src := t.TempDir()
	for n, c := range archived {
		writeFile(t, filepath.Join(src, n), string(c), 0o600)
	}
	plain := filepath.Join(t.TempDir(), "data.tar.gz")
	if out, err := exec.Command("tar", "-czf", plain, "-C", src, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar -czf: %v\n%s", err, out)
	}
	must(t, os.RemoveAll(b.runtimeDir))
	f.stop()

	r := b.hbx("restore", plain)
	if r.code != 3 || !strings.Contains(r.stdout, "NOT started") || !strings.Contains(r.stdout, ref) {
		t.Fatalf("hbx restore of a plain tar, no runtime, no registry = %d\n%s%s; want 3 (done, not running) naming %s", r.code, r.stdout, r.stderr, ref)
	}
	sameData(t, b, "after hbx restore", archived)
	if ph, img := restoreJournal(t, b); ph != "not-started" || img != ref {
		t.Errorf("journal after hbx restore: phase %q awaiting %q; want not-started, %s", ph, img, ref)
	}

	f.start()
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install with the registry back = %d\n%s", r.code, r.stderr)
	}
	startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	sameData(t, b, "under hbx supervise", archived)
	deadline := time.Now().Add(slow(t, 30*time.Second))
	for ph, _ := restoreJournal(t, b); ph != ""; ph, _ = restoreJournal(t, b) {
		if time.Now().After(deadline) {
			t.Fatalf("restore journal still in phase %q under a healthy hbx supervise", ph)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
