package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/internal/progcgroup"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
	"github.com/hermesbox/hbx/rehearse"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
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
	stdout, stderr, err := upgradeHeldAtRehearsal(t, b, nil, func() {
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
	// Its cgroup (where one is writable), recorded in the copy.
	var cgroup string
	if len(left) == 1 && strings.Contains(r.stderr, "the rehearsal runs in a cgroup of its own") {
		rec, err := os.ReadFile(filepath.Join(left[0], rehearse.CgroupRecord))
		cgroup = strings.TrimSpace(string(rec))
		if st, serr := os.Stat(cgroup); err != nil || serr != nil || !st.IsDir() {
			t.Errorf("the killed rehearsal records cgroup %q (%v), which is not there: %v", cgroup, err, serr)
		}
		t.Logf("the killed rehearsal left its cgroup %s", cgroup)
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
	if _, err := os.Stat(cgroup); cgroup != "" && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after the next upgrade the killed rehearsal's cgroup %s is left: %v", cgroup, err)
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
// upgrade is past it not one process of that tree is left: in a cgroup
// of its own where the host's cgroup v2 hierarchy is writable (gone
// afterwards), and, after a rollback, by process group, marker and held
// file alone where the cgroup filesystem is read-only (a Docker
// container's), which hbx says in one line.
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

	stderr := rehearseTree(t, b, tree, nil)
	if strings.Count(stderr, "the rehearsal runs in a cgroup of its own")+strings.Count(stderr, "the rehearsal runs without a cgroup") != 1 {
		t.Errorf("hbx upgrade does not say once whether the rehearsal runs in a cgroup:\n%s", stderr)
	}

	mount := progcgroup.Mount("/proc/self/mountinfo")
	if mount == "" {
		return // no cgroup: the run above was the fallback's
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to remount the cgroup filesystem read-only")
	}
	if r := b.hbx("rollback"); r.code != 0 {
		t.Fatalf("hbx rollback = %d\n%s", r.code, r.stderr)
	}
	ro := []string{"unshare", "--mount", "sh", "-c", `mount -o remount,bind,ro "$0" && exec "$@"`, mount}
	stderr = rehearseTree(t, b, tree, ro)
	if n := strings.Count(stderr, "the rehearsal runs without a cgroup"); n != 1 || !strings.Contains(stderr, "read-only file system") {
		t.Errorf("on a read-only cgroup filesystem hbx upgrade says %d times that the rehearsal runs without a cgroup, want once with why:\n%s", n, stderr)
	}
}

// rehearseTree runs hbx upgrade to the tree-shaped release tree (through
// the command wrap, when not nil), held at its rehearsal's ready point,
// and checks that the rehearsal ran the server and its workerd child and
// left none of its processes, nor its cgroup; it returns hbx's stderr.
func rehearseTree(t *testing.T, b *box, tree string, wrap []string) string {
	t.Helper()
	var during []int
	cgroups := map[string]bool{}
	_, stderr, err := upgradeHeldAtRehearsal(t, b, wrap, func() {
		during = rehearsalProcs(b)
		for _, pid := range during {
			if rel, ok := progcgroup.Of("/proc", pid); ok {
				cgroups[rel] = true
			}
		}
	}, "--image", tree, "--mcp-tools", "execute,skills,resume")
	if err != nil {
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
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "the rehearsal runs") || strings.Contains(l, "ignored SIGTERM") {
			t.Log(l)
		}
	}
	if strings.Contains(stderr, "the rehearsal runs in a cgroup of its own") {
		mount := progcgroup.Mount("/proc/self/mountinfo")
		for rel := range cgroups {
			if !strings.HasSuffix(rel, "/rehearsal") {
				t.Errorf("a process of the rehearsal ran in cgroup %s, want the rehearsal's own", rel)
			}
			if _, err := os.Stat(mount + rel); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the rehearsal's cgroup %s is left after hbx upgrade: %v", rel, err)
			}
		}
	}
	return stderr
}

// dataTree describes every entry below dir: relative path -> type and
// mode, size, mtime in ns and content (for regular files).
func dataTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		desc := fmt.Sprintf("%v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("read the tree of %s: %v", dir, err)
	}
	return out
}

// envOf returns the value of k in pid's environment ("" when unset).
func envOf(pid int, k string) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, k+"="); ok {
			return v
		}
	}
	return ""
}

// TestRehearsalKeepsItsOwnPortAndDataE2E: an env file that sets
// EXECUTOR_DATA_DIR to executor.data_dir and PORT to executor.port
// (harmless for the real start: the env file comes after hbx's settings,
// and those are its own values) boots the rehearsal neither on the live
// data nor on the live port, where it met the running payload and was
// refused as "exited with status 1": while the rehearsal is held at its
// ready point its payload listens on another loopback port and the live
// data directory's tree (modes, sizes, mtimes, contents) is as it was;
// the upgrade then completes.
func TestRehearsalKeepsItsOwnPortAndDataE2E(t *testing.T) {
	requireE2E(t)
	requireKillPoints(t)
	b, _, _, v2, _ := upgradeBox(t)
	env := filepath.Join(b.dir, "executor.env")
	writeFile(t, env, "EXECUTOR_DATA_DIR="+b.dataDir+"\nPORT="+strconv.Itoa(b.port)+"\n", 0o600)
	setExecutorKeys(t, b, "  env_file: "+env+"\n")
	preTree := dataTree(t, b.dataDir)

	_, stderr, err := upgradeHeldAtRehearsal(t, b, nil, func() {
		procs := rehearsalProcs(b)
		if len(procs) == 0 {
			t.Error("no process of the rehearsal runs on the copy while it is held")
		}
		for _, pid := range procs {
			if port, host := envOf(pid, "PORT"), envOf(pid, "EXECUTOR_HOST"); port == "" || port == strconv.Itoa(b.port) || host != "127.0.0.1" {
				t.Errorf("the rehearsal's process %d has PORT=%q EXECUTOR_HOST=%q; want a scratch port (not %d) on 127.0.0.1", pid, port, host, b.port)
			}
		}
		if diff := cmp.Diff(preTree, dataTree(t, b.dataDir)); diff != "" {
			t.Errorf("the rehearsal touched the live data directory (-before +during):\n%s", diff)
		}
	}, "--image", v2)
	if err != nil {
		t.Fatalf("hbx upgrade: %v\n%s", err, stderr)
	}
	if b.activeVersion() != "2.0.0" {
		t.Errorf("after the upgrade: active %s, want 2.0.0\n%s", b.activeVersion(), stderr)
	}
}

// TestInstallRehearsalE2E: hbx install after the pin changed to a release
// that crashes on data older releases made (a release change over
// existing data, Executor stopped: while it runs hbx install refuses and
// names hbx upgrade) rehearses it as hbx upgrade does and refuses it,
// naming the crash, quoting its output and saying what to do with the
// pin: nothing backed up, journaled or activated, the live data's tree as
// it was, no scratch copy left, the refused release pruned; with the old
// pin back the box serves the old release again. With --no-rehearsal the
// same install goes on the old way: recorded, activated, not rehearsed,
// and hbx rollback undoes it.
func TestInstallRehearsalE2E(t *testing.T) {
	requireE2E(t)
	b, s, v1, _, _ := upgradeBox(t)
	crash := crashOnOldData(t, v1)
	plat := platform(t)
	m1, mc := testImage(t).Manifests[plat], versionImage(t, "2.0.0-olddata").Manifests[plat]
	pin := func(ref string, m digest.Digest) {
		t.Helper()
		if err := config.WritePin(b.config, ref, plat, m.String()); err != nil {
			t.Fatal(err)
		}
	}
	if r := b.hbx("stop", "executor"); r.code != 0 {
		t.Fatalf("hbx stop executor = %d\n%s", r.code, r.stderr)
	}
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Stopped})
	preTree, v1cur := dataTree(t, b.dataDir), b.current()

	pin(crash, mc)
	r := b.hbx("install")
	if r.code != 1 {
		t.Fatalf("hbx install of a release that crashes on old data = %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("refused in %s:\n%s", r.took.Round(time.Millisecond), r.stderr)
	for _, want := range []string{"failed its rehearsal", "exited with status 1", "was made by an older release", "nothing was stopped, " + v1 + " stays active",
		"executor.image still pins " + crash + ": pin " + v1 + " back", "hbx install --no-rehearsal"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, r.stderr)
		}
	}
	if b.current() != v1cur || b.activeVersion() != "1.0.0" {
		t.Errorf("after the refusal: current -> %s (%s), want %s (1.0.0)", b.current(), b.activeVersion(), v1cur)
	}
	if ents, _ := os.ReadDir(filepath.Join(b.dir, "backups")); len(ents) != 0 {
		t.Errorf("the refused install made a backup: %d files", len(ents))
	}
	if _, err := os.Stat(filepath.Join(b.runtimeDir, "upgrade.json")); err == nil {
		t.Error("the refused install wrote a journal")
	}
	if diff := cmp.Diff(preTree, dataTree(t, b.dataDir)); diff != "" {
		t.Errorf("the refused install touched the live data directory (-before +after):\n%s", diff)
	}
	if left := scratches(b); len(left) != 0 {
		t.Errorf("the refused rehearsal left %q", left)
	}
	if rels, _ := os.ReadDir(filepath.Join(b.runtimeDir, "releases")); len(rels) != 1 || !strings.Contains(r.stderr, "pruned old releases: removed 1 release") {
		t.Errorf("after the refusal releases/ holds %d releases, want only 1.0.0's (the refused one pruned)\n%s", len(rels), r.stderr)
	}
	pin(v1, m1)
	if r := b.hbx("start", "executor"); r.code != 0 {
		t.Fatalf("hbx start executor on the old pin after the refusal = %d\n%s", r.code, r.stderr)
	}
	healthyAt(t, b.port, 60*time.Second)
	if st := readState(t, b.dataDir); st.Version != "1.0.0" {
		t.Errorf("after the refusal the box runs %+v, want 1.0.0", st)
	}

	// --no-rehearsal: the old way, recorded and activated untried.
	if r := b.hbx("stop", "executor"); r.code != 0 {
		t.Fatalf("hbx stop executor = %d\n%s", r.code, r.stderr)
	}
	s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Stopped})
	pin(crash, mc)
	r = b.hbx("install", "--no-rehearsal")
	if r.code != 0 || !strings.Contains(r.stdout, "not rehearsed on a copy of the data (--no-rehearsal)") || strings.Contains(r.stderr, "rehearsing") {
		t.Fatalf("hbx install --no-rehearsal = %d, want 0, switched without a rehearsal\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if j, err := upgrade.ReadJournal(b.runtimeDir); err != nil || j == nil || j.Phase != upgrade.PhaseDone || j.By != upgrade.ByInstall || b.current() == v1cur {
		t.Errorf("after hbx install --no-rehearsal: journal %+v (%v), current %s; want done by hbx install, not %s", j, err, b.current(), v1cur)
	}
	if r := b.hbx("rollback"); r.code != 0 || b.activeVersion() != "1.0.0" {
		t.Errorf("hbx rollback after hbx install --no-rehearsal = %d, active %s; want 0, 1.0.0\n%s", r.code, b.activeVersion(), r.stderr)
	}
}

// upgradeHeldAtRehearsal runs hbx upgrade with args on b (through the
// command wrap, when not nil), held at the rehearsal's ready point
// (killpoint.RehearsalReady, while a gate file exists). Once its log says
// the release passed its rehearsal, while the rehearsal's processes still
// run on the copy, it calls during, then lets the upgrade go on; it
// returns the upgrade's stdout, stderr and exit error. An upgrade that
// ends without passing its rehearsal fails t, during not called.
func upgradeHeldAtRehearsal(t *testing.T, b *box, wrap []string, during func(), args ...string) (stdout, stderr string, err error) {
	t.Helper()
	gate := filepath.Join(t.TempDir(), "gate")
	writeFile(t, gate, "", 0o600)
	argv := append(append(slices.Clone(wrap), binary(t), "--config", b.config, "upgrade"), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
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
	passed := false
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if passed = strings.Contains(sc.Text(), "passed its rehearsal"); passed {
			break
		}
	}
	if !passed {
		os.Remove(gate)
		werr := cmd.Wait()
		t.Fatalf("hbx upgrade %s ended (%v) without passing its rehearsal:\n%s", strings.Join(args, " "), werr, log.String())
	}
	during()
	os.Remove(gate)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	return out.String(), log.String(), err
}
