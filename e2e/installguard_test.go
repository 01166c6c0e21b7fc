package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/registrytest"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

// TestInstallReleaseChangeE2E: hbx install never changes the active
// release under existing data except the way hbx upgrade does. While
// Executor runs it refuses (the config edited, or a flag) and points to hbx
// upgrade, but a warm no-op and --verify go ahead; with Executor stopped
// (supervisor up) and with no supervisor at all, it takes a pre-change
// backup, records the change and hbx rollback undoes it; without
// backup.passphrase_file it refuses; and after a change that bypassed the
// record (no data at the time), hbx rollback says so.
func TestInstallReleaseChangeE2E(t *testing.T) {
	requireE2E(t)
	b, s, v1ref, v2ref, _ := upgradeBox(t)
	plat := platform(t)
	m1, m2 := testImage(t).Manifests[plat], versionImage(t, "2.0.0").Manifests[plat]
	pin := func(ref string, m digest.Digest) {
		t.Helper()
		if err := config.WritePin(b.config, ref, plat, m.String()); err != nil {
			t.Fatal(err)
		}
	}
	backups := func() int {
		ents, _ := os.ReadDir(filepath.Join(b.dir, "backups"))
		return len(ents)
	}
	unchanged := func(what, cur string, nBackups int, journal bool) {
		t.Helper()
		if got := b.current(); got != cur {
			t.Errorf("%s: current -> %q, want %q", what, got, cur)
		}
		if n := backups(); n != nBackups {
			t.Errorf("%s: %d files in the backup dir, want %d", what, n, nBackups)
		}
		if _, err := os.Stat(filepath.Join(b.runtimeDir, "upgrade.json")); (err == nil) != journal {
			t.Errorf("%s: upgrade.json exists %v, want %v", what, err == nil, journal)
		}
	}
	refused := func(what string, r result, want ...string) {
		t.Helper()
		if r.code != 1 {
			t.Fatalf("%s: hbx install = %d, want 1 (refused)\n%s%s", what, r.code, r.stdout, r.stderr)
		}
		t.Logf("%s: %s", what, lastLine(r.stderr))
		for _, w := range want {
			if !strings.Contains(lastLine(r.stderr), w) {
				t.Errorf("%s: error %q does not say %q", what, lastLine(r.stderr), w)
			}
		}
	}
	v1cur := b.current()

	// 1. Executor runs: the same release is fine, another is refused.
	if r := b.hbx("install"); r.code != 0 || !strings.Contains(r.stdout, "up to date") {
		t.Fatalf("warm hbx install while Executor runs = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := b.hbx("install", "--verify"); r.code != 0 {
		t.Fatalf("hbx install --verify while Executor runs = %d\n%s", r.code, r.stderr)
	}
	pin(v2ref, m2)
	refused("config edited, Executor running", b.hbx("install"),
		"refuse to change the active release from "+v1ref+" to "+v2ref+" while Executor runs", "reports executor RUNNING", "use hbx upgrade --image "+v2ref)
	unchanged("refused while running", v1cur, 0, false)
	// --json: the refusal still ends with the result line.
	r := b.hbx("install", "--json")
	var res struct {
		Event, Error string
		Changed      bool
	}
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &res); r.code != 1 || err != nil || res.Event != "result" || res.Changed || !strings.Contains(res.Error, "while Executor runs") {
		t.Errorf("hbx install --json refused = %d, last stdout line %q; want 1 and a result line with the error", r.code, lastLine(r.stdout))
	}
	pin(v1ref, m1)
	refused("flag, Executor running", b.hbx("--executor-image", v2ref, "--executor-platform-digests", plat+"="+m2.String(), "install"),
		"while Executor runs", "use hbx upgrade --image "+v2ref)
	unchanged("refused while running (flag)", v1cur, 0, false)

	// 2. Executor stopped, the supervisor up: a recorded change.
	if r := b.hbx("stop", "executor"); r.code != 0 {
		t.Fatalf("hbx stop executor = %d\n%s", r.code, r.stderr)
	}
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Stopped})
	pin(v2ref, m2)
	r = b.hbx("install")
	if r.code != 0 {
		t.Fatalf("hbx install over stopped Executor = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("recorded change: %s", strings.TrimSpace(r.stdout))
	if !strings.Contains(r.stdout, "pre-change backup: ") || !strings.Contains(r.stdout, "replacing "+v1ref) {
		t.Errorf("hbx install output does not name the backup and the replaced release:\n%s", r.stdout)
	}
	if got := b.activeVersion(); got != "2.0.0" {
		t.Errorf("active version %q after the recorded change, want 2.0.0", got)
	}
	j, err := upgrade.ReadJournal(b.runtimeDir)
	if err != nil || j == nil || j.Phase != upgrade.PhaseDone || j.By != upgrade.ByInstall || j.Backup == "" {
		t.Fatalf("journal %+v (%v), want done by hbx install with a backup", j, err)
	}
	if st := statusOf(s.waitStates(5*time.Second, map[string]supervisor.State{"executor": supervisor.Stopped}), "executor"); st.State != supervisor.Stopped {
		t.Errorf("executor %s after install, want it left STOPPED", st.State)
	}
	if r := b.hbx("rollback"); r.code != 0 {
		t.Fatalf("hbx rollback after the recorded install = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got, img := b.activeVersion(), b.configuredImage(); got != "1.0.0" || img != v1ref {
		t.Errorf("after rollback: active %q, config %q; want 1.0.0 and %s", got, img, v1ref)
	}
	healthyAt(t, b.port, 60*time.Second)

	// 3. No supervisor, data, no passphrase file: refused.
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
	withPass := readFile(t, b.config)
	noPass := regexp.MustCompile(`(?m)^\s*passphrase_file:.*\n`).ReplaceAllString(withPass, "")
	if err := os.WriteFile(b.config, []byte(noPass), 0o600); err != nil {
		t.Fatal(err)
	}
	pin(v2ref, m2)
	n, cur := backups(), b.current()
	refused("no passphrase file", b.hbx("install"), "over the data in "+b.dataDir+" without a pre-change backup: set backup.passphrase_file", "use hbx upgrade --image "+v2ref)
	unchanged("refused without a passphrase", cur, n, true)

	// 4. No supervisor, data, a passphrase file: recorded, rolled back.
	pin(v1ref, m1)
	if err := os.WriteFile(b.config, []byte(withPass), 0o600); err != nil {
		t.Fatal(err)
	}
	pin(v2ref, m2)
	if r := b.hbx("install"); r.code != 0 || !strings.Contains(r.stdout, "pre-change backup: ") {
		t.Fatalf("hbx install with no supervisor = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := b.activeVersion(); got != "2.0.0" {
		t.Errorf("active version %q, want 2.0.0", got)
	}
	if r := b.hbx("rollback"); r.code != 0 {
		t.Fatalf("hbx rollback with no supervisor = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := b.activeVersion(); got != "1.0.0" {
		t.Errorf("active version %q after rollback, want 1.0.0", got)
	}

	// 5. A change that bypassed the record (no data then, as an older
	// hbx install did with data): rollback says what is recorded.
	away := b.dataDir + ".away"
	if err := os.Rename(b.dataDir, away); err != nil {
		t.Fatal(err)
	}
	pin(v2ref, m2)
	if r := b.hbx("install"); r.code != 0 || strings.Contains(r.stdout, "pre-change") {
		t.Fatalf("hbx install with no data = %d, want a plain install\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := os.Rename(away, b.dataDir); err != nil {
		t.Fatal(err)
	}
	r = b.hbx("rollback")
	if r.code != 1 {
		t.Fatalf("hbx rollback after an unrecorded change = %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("rollback: %s", lastLine(r.stderr))
	if msg := lastLine(r.stderr); !strings.Contains(msg, "the active release "+v2ref+" was installed without a record") || strings.Contains(msg, "already rolled back") {
		t.Errorf("hbx rollback = %q, want it to say the active release was not installed by a recorded upgrade", msg)
	}
}

// TestSuperviseInstallOnStartChangeE2E: with executor.install_on_start,
// a supervisor started on a config that names another release over
// existing data changes it the recorded way (pre-change backup, journal)
// before it starts Executor, prunes as hbx install does (a release
// neither current nor previous goes, in one log line), and hbx rollback
// undoes it.
func TestSuperviseInstallOnStartChangeE2E(t *testing.T) {
	requireE2E(t)
	b, s, v1ref, v2ref, _ := upgradeBox(t)
	plat := platform(t)
	m2 := versionImage(t, "2.0.0").Manifests[plat]
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
	cfg := strings.Replace(readFile(t, b.config), "executor:\n", "executor:\n  install_on_start: true\n", 1)
	if err := os.WriteFile(b.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := config.WritePin(b.config, v2ref, plat, m2.String()); err != nil {
		t.Fatal(err)
	}
	// An old release an earlier change left: neither current nor
	// previous once v2 is active.
	old := filepath.Join(b.runtimeDir, "releases", digest.FromString("an old release").Encoded())
	if err := os.MkdirAll(filepath.Join(old, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	s2 := startSupervise(t, b, s.socket, s.dir)
	healthyAt(t, b.port, 90*time.Second)
	s2.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	if got := b.activeVersion(); got != "2.0.0" {
		t.Fatalf("active version %q after install on start, want 2.0.0", got)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) || strings.Count(readFile(t, s2.log), "pruned old releases: removed 1 release") != 1 {
		t.Errorf("old release after install on start: %v; want it pruned, in one line of the log:\n%s", err, readFile(t, s2.log))
	}
	if rels := runtimeFootprint(t, b, "after the install on start"); !slices.Equal(rels, linked(t, b)) {
		t.Errorf("releases %q after install on start, want only current and previous %q", rels, linked(t, b))
	}
	j, err := upgrade.ReadJournal(b.runtimeDir)
	if err != nil || j == nil || j.Phase != upgrade.PhaseDone || j.By != upgrade.ByInstall || j.Backup == "" || j.Old.Image != v1ref {
		t.Fatalf("journal %+v (%v), want a change from %s done by hbx install with a backup", j, err, v1ref)
	}
	if _, err := os.Stat(j.Backup); err != nil {
		t.Errorf("pre-change backup: %v", err)
	}
	if r := b.hbx("rollback"); r.code != 0 {
		t.Fatalf("hbx rollback after install on start = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := b.activeVersion(); got != "1.0.0" {
		t.Errorf("active version %q after rollback, want 1.0.0", got)
	}
	healthyAt(t, b.port, 60*time.Second)
}

// slowBox is a box whose registry is behind a proxy with the rules
// rules returns for the image's layers (in order; big is the biggest).
func slowBox(t *testing.T, extra string, rules func(layers []v1.Descriptor, big v1.Descriptor) []registrytest.Rule) *box {
	t.Helper()
	reg, img, ref := pushedInto(t, t.TempDir())
	p := registrytest.NewProxy(t, reg.URL())
	layers := layersOf(t, img)
	big := slices.MaxFunc(layers, func(a, b v1.Descriptor) int { return int(a.Size - b.Size) })
	p.Add(rules(layers, big)...)
	return proxiedBox(t, reg, p.Host()+"/"+ref, img, e2eStallLines+extra)
}

// TestInstallDeadlineE2E: a registry that trickles bytes (never silent
// long enough to count as stalled) fails the install at install.timeout
// with one line naming the key; nothing is activated.
func TestInstallDeadlineE2E(t *testing.T) {
	requireE2E(t)
	b := slowBox(t, "install:\n  timeout: 2s\n  min_rate: 0\n", func(_ []v1.Descriptor, big v1.Descriptor) []registrytest.Rule {
		return []registrytest.Rule{{Path: big.Digest.String(), Fault: registrytest.Drip(16, 50*time.Millisecond)}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "--config", b.config, "install")
	cmd.Env = cleanEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	var ee *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("hbx install through a trickling registry = %v after %s, want exit 1 at the 2s deadline\n%s", err, took, stderr.String())
	}
	msg := lastLine(stderr.String())
	t.Logf("failed after %s: %s", took.Round(time.Millisecond), msg)
	for _, w := range []string{"hbx: install: install deadline passed: no release after 2s at layer ", ": nothing was activated (no release is active); ", "install.timeout 2s"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
	if took > 30*time.Second {
		t.Errorf("took %s, want about the 2s deadline", took)
	}
	if b.current() != "" {
		t.Errorf("a timed-out install activated %s", b.current())
	}
}

// TestInstallInterruptE2E: SIGINT during hbx install --json ends it with
// one line saying nothing was activated and which blobs are kept (no raw
// "context canceled"), and the last stdout line is still the result,
// carrying the error.
func TestInstallInterruptE2E(t *testing.T) {
	requireE2E(t)
	// The last layer trickles in: the ones before it are complete blobs
	// by the time it starts.
	var last v1.Descriptor
	b := slowBox(t, "", func(layers []v1.Descriptor, _ v1.Descriptor) []registrytest.Rule {
		last = layers[len(layers)-1]
		return []registrytest.Rule{{Path: last.Digest.String(), Fault: registrytest.Drip(4, 50*time.Millisecond)}}
	})
	cmd := exec.Command(binary(t), "--config", b.config, "install", "--json")
	cmd.Env = cleanEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sent := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		var ev struct {
			Event  string `json:"event"`
			Digest string `json:"digest"`
			Done   int64  `json:"done"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) == nil && !sent && ev.Event == "layer-start" && ev.Digest == last.Digest.String() {
			cmd.Process.Signal(os.Interrupt)
			sent = true
		}
	}
	err = cmd.Wait()
	if !sent {
		t.Fatalf("hbx install ended before the last layer started: %v\n%s", err, stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("interrupted hbx install = %v, want exit 1\n%s", err, stderr.String())
	}
	msg := lastLine(stderr.String())
	t.Logf("stderr: %s", msg)
	want := regexp.MustCompile(`^hbx: install: interrupted at layer 3/3 sha256:[0-9a-f]{64}: nothing was activated \(no release is active\); [1-9]\d* complete blobs \(.*\) are kept in ` + regexp.QuoteMeta(filepath.Join(b.runtimeDir, "blobs")) + ` for the next run$`)
	if !want.MatchString(msg) || strings.Contains(stderr.String(), "context canceled") {
		t.Errorf("last stderr line %q, want it to match %s and no raw context error", msg, want)
	}
	var res struct {
		Event   string `json:"event"`
		Changed bool   `json:"changed"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || res.Event != "result" || res.Changed || !strings.Contains(res.Error, "interrupted at layer 3/3 ") {
		t.Errorf("last stdout line %q, want a result line with the error", lines[len(lines)-1])
	}
	if b.current() != "" {
		t.Errorf("an interrupted install activated %s", b.current())
	}
}

// TestInstallTerminalE2E runs hbx install on a pseudo-terminal (script(1))
// through a slow registry, with log lines arriving while a layer's
// progress line is drawn, and presses Ctrl-C mid-layer: on the rendered
// screen no log line or error shares a line with a progress line.
func TestInstallTerminalE2E(t *testing.T) {
	requireE2E(t)
	if _, err := exec.LookPath("script"); err != nil {
		testenv.Missing(t, "script(1) is not installed (apt-get install bsdutils)")
	}
	// The biggest layer is cut once after 2 MB (a retry, logged while its
	// progress line is drawn), then trickles in.
	b := slowBox(t, "", func(_ []v1.Descriptor, big v1.Descriptor) []registrytest.Rule {
		return []registrytest.Rule{
			{Path: big.Digest.String(), Times: 1, Fault: registrytest.ResetAfter(2 << 20)},
			{Path: big.Digest.String(), Fault: registrytest.Drip(64<<10, 50*time.Millisecond)},
		}
	})
	cmd := exec.Command("script", "-qfec", binary(t)+" --config "+b.config+" install", "/dev/null")
	cmd.Env = append(cleanEnv(), "TERM=xterm", "COLUMNS=200", "LINES=50")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var screen bytes.Buffer
	cmd.Stdout = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return screen.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		s := screen.String()
		mu.Unlock()
		// A retry was logged and the layer's progress line drawn again.
		if i := strings.Index(s, "retrying registry request"); i >= 0 && regexp.MustCompile(`layer \d+/\d+ sha256:[0-9a-f]{12}\s+[0-9.]+/[0-9.]+ MiB`).MatchString(s[i:]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress line within 60s:\n%q", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	stdin.Write([]byte{3}) // Ctrl-C, through the terminal's line discipline
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("hbx install still running 30s after Ctrl-C")
	}
	stdin.Close()
	mu.Lock()
	raw := screen.String()
	mu.Unlock()
	rendered := render(raw)
	progress := regexp.MustCompile(`layer \d+/\d+ sha256:[0-9a-f]{12}\s+[0-9.]+/[0-9.]+ MiB`)
	sawError := false
	for _, l := range rendered {
		if i := progress.FindStringIndex(l); i != nil && (i[0] != 0 || strings.Contains(l, "level=") || strings.Contains(l, "hbx:")) {
			t.Errorf("a progress line shares its line with other output: %q", l)
		}
		if strings.Contains(l, "level=") && !strings.HasPrefix(l, "time=") {
			t.Errorf("a log line does not start its own line: %q", l)
		}
		if strings.Contains(l, "hbx: install: interrupted") {
			sawError = true
			if !regexp.MustCompile(`^hbx: install: interrupted at layer \d/\d sha256:[0-9a-f]{64}: nothing was activated`).MatchString(l) {
				t.Errorf("the error does not start its own line: %q", l)
			}
		}
	}
	if !sawError {
		t.Errorf("no interrupted error on the screen:\n%s", strings.Join(rendered, "\n"))
	}
	if t.Failed() {
		t.Logf("raw output: %q", raw)
	}
}

// render is what a terminal shows for out: per line, each carriage return
// goes back to column 0 and ESC[K clears to the end of the line.
func render(out string) []string {
	var lines []string
	for _, l := range strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n") {
		var buf []byte
		col := 0
		for i := 0; i < len(l); i++ {
			switch {
			case l[i] == '\r':
				col = 0
			case strings.HasPrefix(l[i:], "\033[K"):
				buf = buf[:col]
				i += 2
			default:
				if col < len(buf) {
					buf[col] = l[i]
				} else {
					buf = append(buf, l[i])
				}
				col++
			}
		}
		lines = append(lines, string(buf))
	}
	return lines
}

// writerFunc adapts a function to io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
