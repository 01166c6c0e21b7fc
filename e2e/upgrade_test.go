package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
	"github.com/hermesbox/hbx/supervisor"
)

// Second versions of the test image, built once per run: "2.0.0" writes
// state format 2 (a migration: 1.0.0 refuses its data), "2.0.0-sick"
// also answers 503 on /api/health.
var (
	versionsMu sync.Mutex
	versions   = map[string]*testimage.Image{}
)

func versionImage(t *testing.T, version string, extraEnv ...string) *testimage.Image {
	t.Helper()
	versionsMu.Lock()
	defer versionsMu.Unlock()
	if img := versions[version]; img != nil {
		return img
	}
	tarballs, err := testimage.BunTarballs(testenv.RepoRoot(t))
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("test image: %v", err))
	}
	dir, err := runTempDir("hbx-e2e-image-" + version + "-")
	if err != nil {
		t.Fatal(err)
	}
	img, err := testimage.BuildLayout(dir, testimage.Options{BunTarballs: tarballs, Version: version, StateFormat: 2, ExtraEnv: extraEnv})
	if err != nil {
		t.Fatal(err)
	}
	versions[version] = img
	return img
}

// upgradeBox is an installed 1.0.0 box under hbx supervise with backup
// settings; it returns the box, its supervisor, the 1.0.0 reference and
// the references of 2.0.0 and 2.0.0-sick pushed to the same registry.
func upgradeBox(t *testing.T) (b *box, s *supervised, v1, v2, sick string) {
	t.Helper()
	reg, _, v1 := pushed(t)
	b = newBox(t, reg, v1, nil, "")
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install = %d\n%s", r.code, r.stderr)
	}
	socket, dir := supervisorConfig(t, b, "")
	pass := filepath.Join(b.dir, "backup.pass")
	if err := os.WriteFile(pass, []byte("correct horse battery staple\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(b.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "# the backup settings, a comment that must survive\nbackup:\n  dir: %s\n  passphrase_file: %s\n  health_wait: %s\n", filepath.Join(b.dir, "backups"), pass, slow(t, 15*time.Second))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := reg.Host() + "/rhyssullivan/executor-selfhost"
	for _, v := range []struct {
		ref *string
		tag string
		env []string
	}{{&v2, "2.0.0", nil}, {&sick, "2.0.0-sick", []string{"HBXTEST_FAIL_HEALTH=1"}}} {
		img := versionImage(t, v.tag, v.env...)
		d, err := testimage.Push(ctx, img.Dir, name+":v"+v.tag)
		if err != nil {
			t.Fatal(err)
		}
		*v.ref = name + ":v" + v.tag + "@" + d.String()
	}
	s = startSupervise(t, b, socket, dir)
	healthyAt(t, b.port, 60*time.Second)
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	return b, s, v1, v2, sick
}

// state is Executor's state.json in the data directory.
type state struct {
	Format  int    `json:"format"`
	Version string `json:"version"`
	Starts  int    `json:"starts"`
}

func readState(t *testing.T, dataDir string) state {
	t.Helper()
	var st state
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dataDir, "state.json"))), &st); err != nil {
		t.Fatalf("state.json: %v", err)
	}
	return st
}

// activeVersion is the version of the test image the current release is
// (from its rootfs).
func (b *box) activeVersion() string {
	v, _ := os.ReadFile(filepath.Join(b.runtimeDir, "current/rootfs/app/apps/host-selfhost/VERSION"))
	return strings.TrimSpace(string(v))
}

// configuredImage is executor.image in the config file.
func (b *box) configuredImage() string {
	b.t.Helper()
	for _, l := range strings.Split(readFile(b.t, b.config), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "image: "); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// restart stops s and starts a new supervisor, which recovers first.
func restart(t *testing.T, b *box, s *supervised) *supervised {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
	s2 := startSupervise(t, b, s.socket, s.dir)
	healthyAt(t, b.port, 60*time.Second)
	s2.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	return s2
}

// TestUpgradeE2E: a refused reference changes nothing; a healthy upgrade
// moves release, config and data format together; hbx rollback puts the
// old release and the pre-upgrade data back and keeps the newer data
// aside. The arm64 suite runs it (the Makefile's E2E_ARM64_TESTS): the
// upgrade installs the new index's arm64 child, the arm64 Bun migrates
// the data, and the rollback restores the arm64 binary's own pre-upgrade
// archive. TestUpgradeUnhealthyRollsBackE2E holds the rest.
func TestUpgradeE2E(t *testing.T) {
	requireE2E(t)
	b, _, v1, v2, _ := upgradeBox(t)
	if err := os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("v1 data"), 0o600); err != nil {
		t.Fatal(err)
	}
	releasesBefore, _ := os.ReadDir(filepath.Join(b.runtimeDir, "releases"))

	// Refused before anything happens.
	noDigest, _, _ := strings.Cut(v2, "@")
	for _, ref := range []string{noDigest, strings.SplitN(noDigest, ":v", 2)[0] + "@" + strings.SplitN(v2, "@", 2)[1], v1} {
		r := b.hbx("upgrade", "--image", ref)
		if r.code == 0 {
			t.Fatalf("hbx upgrade --image %s = 0, want a refusal", ref)
		}
		t.Logf("refused %s (exit %d): %s", ref, r.code, strings.TrimSpace(r.stderr))
	}
	if after, _ := os.ReadDir(filepath.Join(b.runtimeDir, "releases")); len(after) != len(releasesBefore) {
		t.Errorf("a refused upgrade changed releases/: %d entries, want %d", len(after), len(releasesBefore))
	}
	if _, err := os.Stat(filepath.Join(b.runtimeDir, "upgrade.json")); err == nil {
		t.Errorf("a refused upgrade wrote upgrade.json")
	}
	if ents, _ := os.ReadDir(filepath.Join(b.dir, "backups")); len(ents) != 0 {
		t.Errorf("a refused upgrade made a backup: %d files", len(ents))
	}

	// A healthy upgrade.
	pre := stableFiles(t, b.dataDir)
	preState := readState(t, b.dataDir)
	start := time.Now()
	r := b.hbx("upgrade", "--image", v2)
	if r.code != 0 {
		t.Fatalf("hbx upgrade = %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("upgrade took %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(r.stdout))
	if !strings.Contains(r.stdout, v1) || !strings.Contains(r.stdout, v2) {
		t.Errorf("output does not say old → new: %s", r.stdout)
	}
	if got := b.activeVersion(); got != "2.0.0" {
		t.Errorf("active version %q after upgrade, want 2.0.0", got)
	}
	if got := b.configuredImage(); got != v2 {
		t.Errorf("config image %q after upgrade, want %q", got, v2)
	}
	if !strings.Contains(readFile(t, b.config), "a comment that must survive") {
		t.Errorf("the config file lost its comment:\n%s", readFile(t, b.config))
	}
	healthyAt(t, b.port, 30*time.Second)
	if st := readState(t, b.dataDir); st.Format != 2 || st.Version != "2.0.0" {
		t.Errorf("state after upgrade %+v, want format 2 by 2.0.0", st)
	}
	if r := b.hbx("health"); r.code != 0 {
		t.Errorf("hbx health after upgrade = %d: %s%s", r.code, r.stdout, r.stderr)
	}
	os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("v2 data"), 0o600)

	// hbx rollback after the good upgrade.
	start = time.Now()
	r = b.hbx("rollback")
	if r.code != 0 {
		t.Fatalf("hbx rollback = %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("rollback took %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(r.stdout))
	checkRolledBack(t, b, v1, pre, preState)
	if again := b.hbx("rollback"); again.code == 0 {
		t.Errorf("a second hbx rollback = 0, want a refusal")
	} else {
		t.Logf("second rollback refused: %s", strings.TrimSpace(again.stderr))
	}
}

// TestUpgradeUnhealthyRollsBackE2E: an upgrade whose runtime never becomes
// healthy rolls back by itself (without the rehearsal, which would refuse
// it first: TestUpgradeRehearsalE2E), the release and the pre-upgrade data
// as before. Native only: the health gate's deadline and the rollback are
// the same code on every architecture, and TestUpgradeE2E's hbx rollback
// runs that restore under qemu-user; here the runtime answers 503 until
// backup.health_wait ends, 150 s under emulation (scaled by 10, see
// docs/development.md, "ARM64 under emulation").
func TestUpgradeUnhealthyRollsBackE2E(t *testing.T) {
	requireE2E(t)
	b, _, v1, _, sick := upgradeBox(t)
	if err := os.WriteFile(filepath.Join(b.dataDir, "generation"), []byte("v1 data"), 0o600); err != nil {
		t.Fatal(err)
	}
	pre, preState := stableFiles(t, b.dataDir), readState(t, b.dataDir)
	start := time.Now()
	r := b.hbx("upgrade", "--image", sick, "--no-rehearsal")
	if r.code != 1 {
		t.Fatalf("hbx upgrade to the sick image = %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("failed upgrade took %s: %s", time.Since(start).Round(time.Millisecond), lastLine(r.stderr))
	if !strings.Contains(r.stderr, "rolled back") || !strings.Contains(r.stderr, "health") {
		t.Errorf("the error does not say it rolled back after failing health: %s", r.stderr)
	}
	checkRolledBack(t, b, v1, pre, preState)
}

// checkRolledBack: 1.0.0 is active and configured, its data is the
// pre-upgrade data (state.json only counts one more start), and the data
// the 2.0.0 runtime wrote is kept aside.
func checkRolledBack(t *testing.T, b *box, v1 string, pre map[string]string, preState state) {
	t.Helper()
	if got := b.activeVersion(); got != "1.0.0" {
		t.Errorf("active version %q after rollback, want 1.0.0", got)
	}
	if got := b.configuredImage(); got != v1 {
		t.Errorf("config image %q after rollback, want %q", got, v1)
	}
	healthyAt(t, b.port, 30*time.Second)
	if got := stableFiles(t, b.dataDir); !sameFiles(got, pre) {
		t.Errorf("data after rollback %q, want the pre-upgrade data %q", keys(got), keys(pre))
	}
	if st := readState(t, b.dataDir); st.Format != 1 || st.Version != preState.Version || st.Starts != preState.Starts+1 {
		t.Errorf("state after rollback %+v, want %+v with one more start", st, preState)
	}
	aside, _ := filepath.Glob(b.dataDir + ".rolled-back-*")
	if len(aside) == 0 {
		t.Fatalf("no %s.rolled-back-* kept", b.dataDir)
	}
	if st := readState(t, aside[len(aside)-1]); st.Format != 2 {
		t.Errorf("kept-aside data has state %+v, want the 2.x runtime's format 2", st)
	}
	if r := b.hbx("health"); r.code != 0 {
		t.Errorf("hbx health after rollback = %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}

// TestKillDuringUpgradeE2E kills hbx upgrade at each step: the next hbx
// supervise start leaves the box on one complete version, configured and
// active alike, whose data format is its own, and runs it.
func TestKillDuringUpgradeE2E(t *testing.T) {
	requireE2E(t)
	b, s, v1, v2, _ := upgradeBox(t)
	kills := 0
	for k := 0; ; k++ {
		at := killedAt(t, b, k, "upgrade", "--image", v2)
		if at == "" {
			break
		}
		kills++
		s = restart(t, b, s)
		ver, img, st := b.activeVersion(), b.configuredImage(), readState(t, b.dataDir)
		switch {
		case ver == "1.0.0" && img == v1 && st.Format == 1:
		case ver == "2.0.0" && img == v2 && st.Format == 2:
		default:
			t.Fatalf("killed at %s: active %s, configured %s, data format %d: not one version", at, ver, img, st.Format)
		}
		t.Logf("killed at %s: on %s after the next hbx supervise", at, ver)
		if ver == "2.0.0" {
			if r := b.hbx("rollback"); r.code != 0 {
				t.Fatalf("killed at %s: hbx rollback = %d: %s", at, r.code, r.stderr)
			}
		}
	}
	if kills < 5 {
		t.Errorf("only %d kill points", kills)
	}
	if got := b.activeVersion(); got != "2.0.0" {
		t.Fatalf("after the uninterrupted upgrade: active %s, want 2.0.0", got)
	}

	// The same for hbx rollback.
	kills = 0
	for k := 0; ; k++ {
		at := killedAt(t, b, k, "rollback")
		if at == "" {
			break
		}
		kills++
		s = restart(t, b, s)
		ver, img, st := b.activeVersion(), b.configuredImage(), readState(t, b.dataDir)
		switch {
		case ver == "1.0.0" && img == v1 && st.Format == 1:
		case ver == "2.0.0" && img == v2 && st.Format == 2:
		default:
			t.Fatalf("rollback killed at %s: active %s, configured %s, data format %d: not one version", at, ver, img, st.Format)
		}
		t.Logf("rollback killed at %s: on %s after the next hbx supervise", at, ver)
		if ver == "1.0.0" {
			if r := b.hbx("upgrade", "--image", v2); r.code != 0 {
				t.Fatalf("rollback killed at %s: hbx upgrade again = %d: %s", at, r.code, r.stderr)
			}
		}
	}
	if kills < 2 {
		t.Errorf("only %d rollback kill points", kills)
	}
	if got := b.activeVersion(); got != "1.0.0" {
		t.Errorf("after the uninterrupted rollback: active %s, want 1.0.0", got)
	}
}
