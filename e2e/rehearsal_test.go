package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
	"github.com/hermesbox/hbx/supervisor"
)

// crashOnOldData pushes version 2.0.0-olddata of the test image beside
// b's: state format 2, and it exits at start-up on data an older release
// made (HBXTEST_REFUSE_OLDER_DATA, as Executor v1.5.30 to v1.5.32 did),
// while it starts on fresh data. It returns its reference.
func crashOnOldData(t *testing.T, v1 string) string {
	t.Helper()
	img := versionImage(t, "2.0.0-olddata", "HBXTEST_REFUSE_OLDER_DATA=1")
	name, _, _ := strings.Cut(v1, ":v")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := testimage.Push(ctx, img.Dir, name+":v2.0.0-olddata")
	if err != nil {
		t.Fatal(err)
	}
	return name + ":v2.0.0-olddata@" + d.String()
}

// runningThroughout watches the executor under s until stop is called
// and returns what broke "RUNNING with the same pid throughout" ("" when
// nothing did).
func runningThroughout(t *testing.T, s *supervised) (stop func() string) {
	t.Helper()
	c := s.client()
	first := waitExecutor(t, s, 60*time.Second, "RUNNING", func(st supervisor.Status) bool { return st.State == supervisor.Running })
	done := make(chan struct{})
	var mu sync.Mutex
	broke := ""
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			sts, err := c.Status(context.Background())
			st := statusOf(sts, "executor")
			if err != nil || st.State != supervisor.Running || st.PID != first.PID {
				mu.Lock()
				if broke == "" {
					broke = st.State.String() + " pid " + strconv.Itoa(st.PID)
					if err != nil {
						broke = err.Error()
					}
				}
				mu.Unlock()
			}
		}
	}()
	return func() string {
		close(done)
		mu.Lock()
		defer mu.Unlock()
		return broke
	}
}

// scratches lists the rehearsal scratch directories beside b's data.
func scratches(b *box) []string {
	m, _ := filepath.Glob(b.dataDir + ".rehearsal-*")
	return m
}

// TestUpgradeRehearsalE2E: hbx upgrade to a release that crashes on data
// older releases made is refused by its rehearsal, naming the crash and
// quoting its output, with the executor RUNNING on the old release with
// the same pid throughout (it never started again: state.json counts no
// start), nothing activated, pinned or backed up, and no scratch copy
// left; with --no-rehearsal the same upgrade goes on and rolls back. A
// good upgrade passes its rehearsal, whose scratch copy is private
// (0700, the data directory's owner) on a port that is not the box's,
// then proceeds; a second hbx upgrade meanwhile is refused by the lock
// the rehearsal holds. An hbx upgrade killed with SIGKILL during its rehearsal
// leaves the box running, and the next one removes the leftover and
// converges.
func TestUpgradeRehearsalE2E(t *testing.T) {
	requireE2E(t)
	requireKillPoints(t)
	b, s, v1, v2, _ := upgradeBox(t)
	crash := crashOnOldData(t, v1)
	preState := readState(t, b.dataDir)

	stop := runningThroughout(t, s)
	r := b.hbx("upgrade", "--image", crash)
	if broke := stop(); broke != "" {
		t.Errorf("during the refused upgrade the executor was not RUNNING with one pid throughout: %s", broke)
	}
	if r.code != 1 {
		t.Fatalf("hbx upgrade to a release that crashes on old data = %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("refused in %s:\n%s", r.took.Round(time.Millisecond), r.stderr)
	for _, want := range []string{"failed its rehearsal", "exited with status 1", "was made by an older release", "nothing was stopped, " + v1 + " stays active"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, r.stderr)
		}
	}
	if got, img := b.activeVersion(), b.configuredImage(); got != "1.0.0" || img != v1 {
		t.Errorf("after the refusal: active %s, configured %s; want 1.0.0, %s", got, img, v1)
	}
	if st := readState(t, b.dataDir); st != preState {
		t.Errorf("the refused rehearsal touched the live data: state %+v, want %+v", st, preState)
	}
	if ents, _ := os.ReadDir(filepath.Join(b.dir, "backups")); len(ents) != 0 {
		t.Errorf("the refused upgrade made a backup: %d files", len(ents))
	}
	if left := scratches(b); len(left) != 0 {
		t.Errorf("the refused rehearsal left %q", left)
	}
	if rels, _ := os.ReadDir(filepath.Join(b.runtimeDir, "releases")); len(rels) != 1 || !strings.Contains(r.stderr, "pruned old releases: removed 1 release") {
		t.Errorf("after the refusal releases/ holds %d releases, want only 1.0.0's (the refused one pruned)\n%s", len(rels), r.stderr)
	}

	// --no-rehearsal: the old way, stopped, activated, rolled back.
	r = b.hbx("upgrade", "--image", crash, "--no-rehearsal")
	if r.code != 1 || !strings.Contains(r.stderr, "rolled back") || strings.Contains(r.stderr, "rehears") {
		t.Errorf("hbx upgrade --no-rehearsal to the crashing release = %d, want 1, rolled back, no rehearsal\n%s", r.code, r.stderr)
	}
	healthyAt(t, b.port, 60*time.Second)

	// A good upgrade, held at its rehearsal's ready point.
	stdout, stderr, err := upgradeHeldAtRehearsal(t, b, func() {
		checkScratch(t, b)
		// A second upgrade meanwhile meets the lock the rehearsal holds.
		if r := b.hbxEnv([]string{"HBX_CONFIG=" + b.config, "HBX_BACKUP_LOCK_WAIT=0s"}, "upgrade", "--image", v2); r.code == 0 || !strings.Contains(r.stderr, "hbx upgrade") || !strings.Contains(r.stderr, "lock") {
			t.Errorf("a second hbx upgrade during the rehearsal = %d, want refused naming the lock and its holder\n%s", r.code, r.stderr)
		} else {
			t.Logf("second upgrade refused: %s", lastLine(r.stderr))
		}
	}, "--image", v2)
	if err != nil {
		t.Fatalf("hbx upgrade to a good release: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "rehearsed on a copy of the data") || b.activeVersion() != "2.0.0" {
		t.Errorf("the good upgrade: active %s, output %q; want 2.0.0, rehearsed", b.activeVersion(), stdout)
	}
	if left := scratches(b); len(left) != 0 {
		t.Errorf("the good upgrade's rehearsal left %q", left)
	}
	if r := b.hbx("rollback"); r.code != 0 {
		t.Fatalf("hbx rollback = %d\n%s", r.code, r.stderr)
	}

	// Killed during the rehearsal: the box runs on, the next converges.
	stop = runningThroughout(t, s)
	r = b.hbxEnv([]string{"HBX_CONFIG=" + b.config, killpoint.Env + "=" + killpoint.RehearsalReady}, "upgrade", "--image", v2)
	if broke := stop(); broke != "" {
		t.Errorf("while hbx upgrade was killed in its rehearsal the executor was not RUNNING with one pid: %s", broke)
	}
	if r.code != -1 {
		t.Fatalf("hbx upgrade with %s=%s = %d, want killed\n%s", killpoint.Env, killpoint.RehearsalReady, r.code, r.stderr)
	}
	left := scratches(b)
	if len(left) != 1 || !strings.Contains(r.stderr, left[0]) {
		t.Errorf("the killed rehearsal left %q, its output names it: %v", left, len(left) == 1 && strings.Contains(r.stderr, left[0]))
	}
	r = b.hbx("upgrade", "--image", v2)
	if r.code != 0 || b.activeVersion() != "2.0.0" {
		t.Fatalf("the next hbx upgrade = %d, active %s\n%s", r.code, b.activeVersion(), r.stderr)
	}
	if !strings.Contains(r.stderr, "removed what an interrupted rehearsal left") {
		t.Errorf("the next upgrade does not say it removed the leftover:\n%s", r.stderr)
	}
	if left := scratches(b); len(left) != 0 {
		t.Errorf("after the next upgrade: %q left", left)
	}
	healthyAt(t, b.port, 30*time.Second)
}

// checkScratch: while the rehearsal is held, its one scratch directory
// is mode 0700, owned as the data directory is, holds a copy of the
// data, and its payload does not listen on the box's port.
func checkScratch(t *testing.T, b *box) {
	t.Helper()
	left := scratches(b)
	if len(left) != 1 {
		t.Fatalf("while rehearsing: scratch directories %q, want one", left)
	}
	st, err := os.Stat(left[0])
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.Stat(b.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("scratch %s mode %v, want 0700", left[0], st.Mode().Perm())
	}
	if got, want := st.Sys().(*syscall.Stat_t), data.Sys().(*syscall.Stat_t); got.Uid != want.Uid || got.Gid != want.Gid {
		t.Errorf("scratch owned by %d:%d, want the data directory's %d:%d", got.Uid, got.Gid, want.Uid, want.Gid)
	}
	if _, err := os.Stat(filepath.Join(left[0], "data", "state.json")); err != nil {
		t.Errorf("scratch holds no copy of the data: %v", err)
	}
	if st := readState(t, filepath.Join(left[0], "data")); st.Version != "2.0.0" || st.Format != 2 {
		t.Errorf("the rehearsal's copy has state %+v, want written by 2.0.0 (format 2)", st)
	}
	if st := readState(t, b.dataDir); st.Format != 1 {
		t.Errorf("the live data has state %+v during the rehearsal, want format 1", st)
	}
}

// rehearsalProcs returns the pids of processes whose environment points
// EXECUTOR_DATA_DIR into a rehearsal scratch copy of b's data.
func rehearsalProcs(b *box) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if strings.HasPrefix(kv, "EXECUTOR_DATA_DIR="+b.dataDir+".rehearsal-") {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// TestRehearsalStopsTheWholeTreeE2E: the rehearsal of today's Executor
// shape (a server with a workerd child that ignores SIGTERM,
// testimage.ShapeTree) runs as a process tree on the copy, and once hbx
// upgrade is past it not one process of that tree is left.
func TestRehearsalStopsTheWholeTreeE2E(t *testing.T) {
	requireE2E(t)
	requireKillPoints(t)
	b, _, v1, _, _ := upgradeBox(t)
	tarballs, err := testimage.BunTarballs(testenv.RepoRoot(t))
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	dir, err := runTempDir("hbx-e2e-image-2.0.0-tree-")
	if err != nil {
		t.Fatal(err)
	}
	img, err := testimage.BuildLayout(dir, testimage.Options{BunTarballs: tarballs, Shape: testimage.ShapeTree, Version: "2.0.0-tree", StateFormat: 2, Platforms: []string{platform(t)}})
	if err != nil {
		t.Fatal(err)
	}
	name, _, _ := strings.Cut(v1, ":v")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := testimage.Push(ctx, img.Dir, name+":v2.0.0-tree")
	if err != nil {
		t.Fatal(err)
	}
	tree := name + ":v2.0.0-tree@" + d.String()
	appendConfig(t, b, "health:\n  token_file: "+filepath.Join(b.dataDir, "api-key")+"\n")

	var during []int
	if _, stderr, err := upgradeHeldAtRehearsal(t, b, func() { during = rehearsalProcs(b) }, "--image", tree, "--mcp-tools", "execute,skills,resume"); err != nil {
		t.Fatalf("hbx upgrade to the tree-shaped release: %v\n%s", err, stderr)
	}
	if len(during) < 2 {
		t.Errorf("during the rehearsal %d processes ran on the copy (%v), want the server and its workerd child", len(during), during)
	}
	if after := rehearsalProcs(b); len(after) != 0 {
		t.Errorf("after hbx upgrade, processes of the rehearsal still run: %v (during: %v)", after, during)
	}
	if got := b.activeVersion(); got != "2.0.0-tree" {
		t.Errorf("active %s after the upgrade, want 2.0.0-tree", got)
	}
}

// TestRehearsalIgnoresAnEnvFileNamingTheLiveDataE2E: an env file that
// sets EXECUTOR_DATA_DIR to executor.data_dir (harmless for the real
// start: the env file comes after hbx's settings) does not boot the
// rehearsal on the live data: while the rehearsal is held at its ready
// point the live state is as it was, and the upgrade then completes.
func TestRehearsalIgnoresAnEnvFileNamingTheLiveDataE2E(t *testing.T) {
	requireE2E(t)
	requireKillPoints(t)
	b, _, _, v2, _ := upgradeBox(t)
	env := filepath.Join(b.dir, "executor.env")
	writeFile(t, env, "EXECUTOR_DATA_DIR="+b.dataDir+"\n", 0o600)
	setExecutorKeys(t, b, "  env_file: "+env+"\n")
	preState := readState(t, b.dataDir)

	_, stderr, err := upgradeHeldAtRehearsal(t, b, func() {
		if st := readState(t, b.dataDir); st != preState {
			t.Errorf("the rehearsal ran on the live data: state %+v, want %+v", st, preState)
		}
	}, "--image", v2)
	if err != nil {
		t.Fatalf("hbx upgrade: %v\n%s", err, stderr)
	}
	if b.activeVersion() != "2.0.0" {
		t.Errorf("after the upgrade: active %s, want 2.0.0\n%s", b.activeVersion(), stderr)
	}
}

// upgradeHeldAtRehearsal runs hbx upgrade with args on b, held at the
// rehearsal's ready point (killpoint.RehearsalReady, while a gate file
// exists): once its log says the release passed its rehearsal (the
// rehearsal's processes still run on the copy), it calls during, then
// lets the upgrade go on; it returns the upgrade's output and exit error.
func upgradeHeldAtRehearsal(t *testing.T, b *box, during func(), args ...string) (stdout, stderr string, err error) {
	t.Helper()
	gate := filepath.Join(t.TempDir(), "gate")
	writeFile(t, gate, "", 0o600)
	cmd := exec.Command(binary(t), append([]string{"--config", b.config, "upgrade"}, args...)...)
	cmd.Env = append(cleanEnv(), killpoint.HoldEnv+"="+killpoint.RehearsalReady+"="+gate)
	var out, log strings.Builder
	cmd.Stdout = &out
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(errPipe)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "passed its rehearsal") {
			break
		}
	}
	during()
	os.Remove(gate)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	return out.String(), log.String(), err
}
