package rehearse

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv/testcgroup"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/internal/procscan"
	"github.com/hermesbox/hbx/internal/progcgroup"
	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/launch"
	"github.com/hermesbox/hbx/release"
)

// runEnv makes the test binary run one rehearsal (runParams, as JSON)
// and exit: 0 when it passed, 1 otherwise; it logs to stderr.
const runEnv = "HBXTEST_REHEARSE_RUN"

// runParams say what rehearsal to run (in this process or another).
type runParams struct {
	DataDir, StateDir, RootDir string // RootDir: the fake release's
	Escapee                    string // the escapee's pid file
	Mode                       string // "serve", "exit" or "hang" (never ready)
	Cgroups                    bool
	ReadOnlyCgroupFS           bool // remount the cgroup v2 mount read-only first (a subprocess in a mount namespace of its own)
	Wait                       time.Duration
}

func init() {
	if p := os.Getenv(runEnv); p != "" && os.Getenv(payloadEnv) == "" && os.Getenv(escapeeEnv) == "" {
		os.Exit(runChild(p))
	}
}

// runChild is the test binary as hbx: it runs the rehearsal p describes.
func runChild(p string) int {
	var rp runParams
	if err := json.Unmarshal([]byte(p), &rp); err != nil {
		return 2
	}
	if rp.ReadOnlyCgroupFS {
		if m := progcgroup.Mount("/proc/self/mountinfo"); m == "" || unix.Mount("", m, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "") != nil {
			return 3
		}
	}
	o := rp.options(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if _, err := Run(context.Background(), o); err != nil {
		slog.New(slog.NewTextHandler(os.Stderr, nil)).Error("rehearsal", "err", err)
		return 1
	}
	return 0
}

// options are the rehearsal's Options: the fake release at rp.RootDir,
// whose payload is this test binary (payloadEnv), judged by api-health.
func (rp runParams) options(log *slog.Logger) Options {
	inst := &release.Installed{Dir: rp.RootDir, Meta: release.Meta{Format: release.MetaFormat, Config: release.ImageConfig{
		Entrypoint: []string{"payload"},
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", payloadEnv + "=1", exitEnv + "=" + map[bool]string{true: "1"}[rp.Mode == "exit"], escapeeEnv + "=" + rp.Escapee},
		WorkingDir: "/",
	}}}
	readiness := health.CheckAPIHealth
	if rp.Mode == "hang" {
		readiness = health.CheckMCPAuth // the payload answers no MCP: never ready
	}
	return Options{
		DataDir: rp.DataDir, Release: inst, Listen: "127.0.0.1", Readiness: readiness, Checks: []string{health.CheckAPIHealth},
		Launch: launch.Options{StateDir: rp.StateDir, Listen: "127.0.0.1", HostPath: "/usr/bin:/bin", DisableIPv6: true},
		Wait:   rp.Wait, StopGrace: 2 * time.Second, Attempts: 1, Cgroups: rp.Cgroups, Logger: log,
	}
}

// newRunParams lays out a data directory, a state directory and a fake
// release whose payload is this test binary.
func newRunParams(t *testing.T, mode string, cgroups bool) runParams {
	t.Helper()
	dir := t.TempDir()
	rp := runParams{
		DataDir: filepath.Join(dir, "data"), StateDir: filepath.Join(dir, "state"), RootDir: filepath.Join(dir, "release"),
		Escapee: filepath.Join(dir, "escapee.pid"), Mode: mode, Cgroups: cgroups, Wait: 2 * time.Minute,
	}
	if mode == "hang" {
		rp.Wait = 10 * time.Minute
	}
	for _, d := range []string{rp.DataDir, rp.StateDir, filepath.Join(rp.RootDir, release.RootfsDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rp.DataDir, "data.db"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	a, err := extract.New(filepath.Join(rp.RootDir, release.RootfsDir), extract.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	layer := tartest.New().Dir("usr", 0o755).Dir("usr/local", 0o755).Dir("usr/local/bin", 0o755).
		File("usr/local/bin/payload", "#!/bin/sh\nexec "+self+"\n", 0o755).Bytes()
	if err := a.Apply(bytes.NewReader(layer)); err != nil {
		t.Fatal(err)
	}
	return rp
}

// requireCgroups fails or skips (testenv.Missing) unless this process
// can make the rehearsal's cgroup.
func requireCgroups(t *testing.T) {
	t.Helper()
	path, err := cgroupPlace(t.TempDir())
	if err != nil {
		testenv.Missing(t, "no writable cgroup v2 hierarchy ("+err.Error()+"; this machine kind has one at /sys/fs/cgroup/unified)")
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		testenv.Missing(t, "the cgroup v2 hierarchy is not writable: "+err.Error())
	}
	_ = (&cgroup{path: path}).remove()
}

// escapeePID waits for the escapee's pid file and returns its pid.
func escapeePID(t *testing.T, rp runParams) int {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(rp.Escapee); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				return pid
			}
		}
	}
	t.Fatal("the payload's escapee wrote no pid")
	return 0
}

// isEscapee reports whether pid is still rp's escapee (alive, its
// environment naming rp's pid file): never a reused pid.
func isEscapee(pid int, rp runParams) bool {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	return err == nil && procscan.Alive(pid) && bytes.Contains(env, []byte(escapeeEnv+"="+rp.Escapee+"\x00"))
}

// killEscapees ends, at the test's end, every escapee whose pid file rp
// names (and its ".again") that is still rp's (the gap without a cgroup
// leaves one; a failed test may too).
func killEscapees(t *testing.T, rp runParams) {
	t.Cleanup(func() {
		for _, r := range []runParams{rp, {Escapee: rp.Escapee + ".again"}} {
			b, _ := os.ReadFile(r.Escapee)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				procscan.Signal(pid, syscall.SIGKILL, func(pid int) bool { return isEscapee(pid, r) })
			}
		}
	})
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRehearsalCgroupStopsAnEscapee: a payload whose child starts a new
// session, holds none of its descriptors (launch's marker, the held
// file) and ignores SIGTERM is stopped with the rehearsal, whether it
// passes or is refused, and the rehearsal's cgroup is gone afterwards.
// Without a cgroup (Cgroups false) the same child outlives the
// rehearsal: the gap the cgroup closes.
func TestRehearsalCgroupStopsAnEscapee(t *testing.T) {
	requireCgroups(t)
	for _, tc := range []struct {
		name, mode string
		cgroups    bool
		refused    bool
	}{
		{"passes", "serve", true, false},
		{"refused", "exit", true, true},
		{"no cgroup: the escapee outlives it", "serve", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rp := newRunParams(t, tc.mode, tc.cgroups)
			killEscapees(t, rp)
			log := &syncBuffer{}
			res, err := Run(context.Background(), rp.options(slog.New(slog.NewTextHandler(log, nil))))
			if tc.refused != errors.Is(err, ErrRefused) || !tc.refused && err != nil {
				t.Fatalf("Run() = %+v, %v; want refused %v\n%s", res, err, tc.refused, log)
			}
			pid := escapeePID(t, rp)
			path, _ := cgroupPlace(rp.DataDir)
			if !tc.cgroups {
				if !isEscapee(pid, rp) {
					t.Errorf("without a cgroup the escapee %d was stopped; the gap is gone, update the docs", pid)
				}
				return
			}
			if isEscapee(pid, rp) {
				t.Errorf("the payload's escapee %d (new session, no descriptors, SIGTERM ignored) outlives the rehearsal\n%s", pid, log)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the rehearsal's cgroup %s is left: %v", path, err)
			}
			if _, err := os.Stat(filepath.Dir(path)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the rehearsal's subtree %s is left: %v", filepath.Dir(path), err)
			}
			for _, want := range []string{"the rehearsal runs in a cgroup of its own", "ignored SIGTERM; killed them"} {
				if !strings.Contains(log.String(), want) {
					t.Errorf("the log does not say %q:\n%s", want, log)
				}
			}
		})
	}
}

// child runs the rehearsal rp in a subprocess (this test binary) with
// sys, and returns it started with its stderr in log.
func child(t *testing.T, rp runParams, sys *syscall.SysProcAttr, log *syncBuffer) *exec.Cmd {
	t.Helper()
	b, _ := json.Marshal(rp)
	self, _ := os.Executable()
	cmd := exec.Command(self)
	cmd.Env = []string{runEnv + "=" + string(b), "PATH=/usr/bin:/bin"}
	cmd.Stderr, cmd.SysProcAttr = log, sys
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// TestRehearsalReadOnlyCgroupFSFallsBack: where the cgroup filesystem is
// read-only (a Docker container's), the rehearsal says so in one line
// and runs as before: by process group, marker and held file.
func TestRehearsalReadOnlyCgroupFSFallsBack(t *testing.T) {
	requireCgroups(t)
	rp := newRunParams(t, "serve", true)
	rp.ReadOnlyCgroupFS = true
	killEscapees(t, rp)
	log := &syncBuffer{}
	cmd := child(t, rp, &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}, log)
	_ = escapeePID(t, rp) // the payload ran; its escapee outlives it here (the gap)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the rehearsal on a read-only cgroup filesystem: %v\n%s", err, log)
	}
	if n := strings.Count(log.String(), "the rehearsal runs without a cgroup"); n != 1 {
		t.Errorf("the log says %d times that the rehearsal runs without a cgroup, want once:\n%s", n, log)
	}
	if !strings.Contains(log.String(), "read-only file system") {
		t.Errorf("the log does not say why:\n%s", log)
	}
}

// testCgroup makes a cgroup for a subprocess to run in (as another
// shell's hbx would) and returns it open for UseCgroupFD; it is removed
// at the end.
func testCgroup(t *testing.T) *os.File {
	t.Helper()
	id := make([]byte, 4)
	if _, err := rand.Read(id); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(progcgroup.Mount("/proc/self/mountinfo"), "hbxtest-"+hex.EncodeToString(id))
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	// Removed with what hbx made in it once empty, or the test fails.
	testcgroup.RemoveCgroup(t, path)
	t.Cleanup(func() { d.Close() })
	return d
}

// TestRehearsalKilledLeavesNothingToTheNext: an hbx killed with SIGKILL
// during its rehearsal, in a cgroup of its own, leaves the payload's
// escapee in the rehearsal's cgroup; the next rehearsal, run from
// another cgroup, finds it through the scratch directory's record,
// stops it, logs it and removes that cgroup.
func TestRehearsalKilledLeavesNothingToTheNext(t *testing.T) {
	requireCgroups(t)
	rp := newRunParams(t, "hang", true)
	killEscapees(t, rp)
	cg := testCgroup(t)
	log := &syncBuffer{}
	cmd := child(t, rp, &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}, log)
	pid := escapeePID(t, rp)
	rel, _ := progcgroup.Of("/proc", pid)
	old := filepath.Join(progcgroup.Mount("/proc/self/mountinfo"), rel)
	if !strings.HasSuffix(rel, "/"+cgroupLeaf) || !strings.Contains(rel, "/hbxtest-") {
		t.Fatalf("the escapee runs in cgroup %s, want the rehearsal's below the killed hbx's own", rel)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !isEscapee(pid, rp) {
		t.Fatalf("the escapee %d died with hbx: nothing to prove\n%s", pid, log)
	}

	again := rp
	again.Mode, again.Escapee = "serve", rp.Escapee+".again"
	next := &syncBuffer{}
	res, err := Run(context.Background(), again.options(slog.New(slog.NewTextHandler(next, nil))))
	if err != nil {
		t.Fatalf("the next rehearsal: %v\n%s", err, next)
	}
	if len(res.Leftovers) != 1 {
		t.Errorf("the next rehearsal removed %q, want the killed one's scratch directory", res.Leftovers)
	}
	if isEscapee(pid, rp) {
		t.Errorf("the killed rehearsal's escapee %d outlives the next rehearsal\n%s", pid, next)
	}
	if !strings.Contains(next.String(), "stopped a process an interrupted rehearsal left") || !strings.Contains(next.String(), "pid="+strconv.Itoa(pid)) {
		t.Errorf("the next rehearsal does not log the escapee %d it stopped:\n%s", pid, next)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed rehearsal's cgroup %s is left: %v", old, err)
	}
}
