// Package e2e runs the real hbx binary against the real registry
// (docker-registry) and the real Bun runtime inside the project's test
// image. It runs under `make e2e` (HBXTEST_E2E=1); elsewhere it skips, and
// under HBXTEST_E2E=1 or CI=true a missing prerequisite fails instead.
// HBXTEST_PLATFORM=linux/arm64 runs the same tests as that platform, the
// binary and its payload under qemu-user (`make e2e-arm64`; see
// platform_test.go).
package e2e

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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

	"github.com/hermesbox/hbx/internal/testenv/testcgroup"

	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
)

var (
	imageOnce sync.Once
	image     *testimage.Image
	imageErr  error
	binOnce   sync.Once
	hbxBin    string
	binErr    error
)

// requireE2E skips unless the e2e run was asked for.
func requireE2E(t *testing.T) {
	t.Helper()
	if os.Getenv("HBXTEST_E2E") != "1" && os.Getenv("CI") != "true" {
		// Not a missing prerequisite: the gate of the end-to-end tests.
		t.Skip("end-to-end test: run `make e2e` (HBXTEST_E2E=1)")
	}
}

// testImage builds the test image layout once per run.
func testImage(t *testing.T) *testimage.Image {
	t.Helper()
	root := testenv.RepoRoot(t)
	imageOnce.Do(func() {
		tarballs, err := testimage.BunTarballs(root)
		if err != nil {
			imageErr = err
			return
		}
		dir, err := runTempDir("hbx-e2e-image-")
		if err != nil {
			imageErr = err
			return
		}
		image, imageErr = testimage.BuildLayout(dir, testimage.Options{BunTarballs: tarballs})
	})
	if imageErr != nil {
		testenv.Unavailable(t, fmt.Sprintf("test image: %v", imageErr))
	}
	return image
}

// binary is the hbx under test: HBXTEST_BIN, or built once for the
// platform under test (with the build tag hbxtest, so its kill points are
// armed); either way checked to be an executable of that platform that
// runs here (see platform_test.go).
func binary(t *testing.T) string {
	t.Helper()
	plat := platform(t)
	binOnce.Do(func() {
		defer func() {
			if binErr == nil {
				binErr = checkBinary(t, hbxBin)
			}
		}()
		if b := os.Getenv("HBXTEST_BIN"); b != "" {
			hbxBin = b
			return
		}
		dir, err := runTempDir("hbx-e2e-bin-")
		if err != nil {
			binErr = err
			return
		}
		hbxBin = filepath.Join(dir, "hbx")
		cmd := exec.Command("go", "build", "-o", hbxBin, "./cmd/hbx")
		cmd.Dir = testenv.RepoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false -tags=containers_image_openpgp,"+killpoint.Tag, "GOOS=linux", "GOARCH="+strings.TrimPrefix(plat, "linux/"))
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return hbxBin
}

// requireKillPoints fails the test unless the hbx under test was built
// with the build tag hbxtest (make e2e-bin): a product binary ignores
// HBXTEST_KILL_AT and HBXTEST_HOLD_AT, and a test that relies on them
// would otherwise fail later with a confusing "want killed".
func requireKillPoints(t *testing.T) {
	t.Helper()
	bin := binary(t)
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("read build settings of %s: %v", bin, err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), killpoint.Tag) {
			return
		}
	}
	t.Fatalf("%s was built without the build tag %s, so its kill points (%s, %s) are inert: build it with make e2e-bin (bin/hbx-e2e) or leave HBXTEST_BIN unset", bin, killpoint.Tag, killpoint.Env, killpoint.HoldEnv)
}

// box is one simulated Hermes Box: its directories and config file.
type box struct {
	t          *testing.T
	dir        string
	config     string
	runtimeDir string
	dataDir    string
	stateDir   string
	port       int
}

// freePort is a port for a box's Executor (or another listener the test
// starts later), reserved for the test until it ends: testenv.FreePort,
// so make e2e's concurrent shards never hand out the same port.
func freePort(t *testing.T) int {
	t.Helper()
	return testenv.FreePort(t)
}

// newBox writes an hbx.yaml for ref served by reg.
func newBox(t *testing.T, reg *testenv.Registry, ref string, pins map[string]string, extra string) *box {
	t.Helper()
	// Registered before the box's own cleanups (which stop its
	// processes), so it runs after them.
	testcgroup.RemoveNewCgroups(t)
	dir := t.TempDir()
	b := &box{t: t, dir: dir, runtimeDir: filepath.Join(dir, "storage/executor-runtime"),
		dataDir: filepath.Join(dir, "workspace/executor/data"), stateDir: filepath.Join(dir, "var/lib/hbx/executor"), port: freePort(t)}
	var pinLines strings.Builder
	for k, v := range pins {
		fmt.Fprintf(&pinLines, "    %s: %q\n", k, v)
	}
	if pinLines.Len() == 0 {
		pinLines.WriteString("    {}\n")
	}
	// executor.user root: the test's directories are 0700 and root's; the
	// default as root, the system user executor, is TestExecutorUserE2E's.
	cfg := fmt.Sprintf(`executor:
  user: root
  image: %q
  platform: linux/%s
  platform_digests:
%s  runtime_dir: %s
  data_dir: %s
  state_dir: %s
  port: %d
  host_port: %d
registry:
  insecure_hosts: [%q]
%s`, ref, arch(t), pinLines.String(), b.runtimeDir, b.dataDir, b.stateDir, b.port, b.port, reg.Host(), extra)
	b.config = filepath.Join(dir, "hbx.yaml")
	if err := os.WriteFile(b.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// hbxCommandLimit bounds one hbx command of [box.hbx] natively (scaled
// by [slow] under emulation, up to hbxCommandCap): far above any
// command's own time on a busy machine, and below the suite's go test
// -timeout, so a hung command fails its own test with its goroutines
// instead of ending the whole run.
const (
	hbxCommandLimit = 4 * time.Minute
	hbxCommandCap   = 20 * time.Minute
)

// hbx runs the binary with the box's config and waits. A command still
// running after hbxCommandLimit gets SIGQUIT (the Go runtime prints every
// goroutine's stack to stderr and exits), then SIGKILL 30 s later, and
// fails the test with its stderr; so does a command whose stdout or
// stderr stays open 30 s after it exited (a process it left behind holds
// them). Call it on the test's goroutine only (it fails the test with
// t.Fatal); off it, use hbxAsync.
func (b *box) hbx(args ...string) result {
	b.t.Helper()
	return b.settle(b.runHbx(context.Background(), binary(b.t), min(slow(b.t, hbxCommandLimit), hbxCommandCap), args))
}

// hbxOutcome is what a command of hbxAsync gives: its result, or why it
// fails the test (err).
type hbxOutcome struct {
	result
	what string
	err  error
}

// hbxAsync starts hbx as [box.hbx] does, in a goroutine that never
// touches the test; settle its outcome on the test's goroutine. A
// command still running when the test ends (it failed or returned
// before settling) is stopped then, as an overrun is (SIGQUIT, SIGKILL
// 30 s later), and waited for: it never outlives its test to hold the
// box's ports, locks or files under the next one.
func (b *box) hbxAsync(args ...string) <-chan hbxOutcome {
	b.t.Helper()
	bin, limit := binary(b.t), min(slow(b.t, hbxCommandLimit), hbxCommandCap)
	ctx, cancel := context.WithCancel(context.Background())
	out, ran := make(chan hbxOutcome, 1), make(chan struct{})
	go func() {
		defer close(ran)
		out <- b.runHbx(ctx, bin, limit, args)
	}()
	b.t.Cleanup(func() {
		cancel()
		<-ran
	})
	return out
}

// settle fails the test with the command's error, if any (call it on
// the test's goroutine), logs its timing and returns its result.
func (b *box) settle(o hbxOutcome) result {
	b.t.Helper()
	if o.err != nil {
		b.t.Fatal(o.err)
	}
	logTiming(b.t, fmt.Sprintf("%s (exit %d)", o.what, o.code), o.took)
	return o.result
}

// runHbx runs bin with the box's config and args, bounded by limit and
// parent; it does not touch the test (it may run off its goroutine).
func (b *box) runHbx(parent context.Context, bin string, limit time.Duration, args []string) hbxOutcome {
	ctx, cancel := context.WithTimeout(parent, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--config", b.config}, args...)...)
	cmd.Env = cleanEnv()
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 30 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	o := hbxOutcome{result: result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}, what: "hbx " + strings.Join(args, " ")}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		o.err = fmt.Errorf("%s: still running after %s: sent SIGQUIT; its stdout:\n%s\nits stderr (with its goroutines):\n%s", o.what, limit, o.stdout, o.stderr)
	case errors.Is(err, exec.ErrWaitDelay):
		o.err = fmt.Errorf("%s: exited, but its stdout or stderr stayed open 30 s after (a process it left behind holds them); its stderr:\n%s", o.what, o.stderr)
	case errors.As(err, &ee):
		o.code = ee.ExitCode()
	case err != nil:
		o.err = fmt.Errorf("run hbx: %w", err)
	}
	return o
}

// cleanEnv drops HBX_* variables of the caller so only the config file counts.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HBX_") {
			env = append(env, kv)
		}
	}
	return env
}

func (b *box) current() string {
	s, _ := os.Readlink(filepath.Join(b.runtimeDir, "current"))
	return s
}

// pushed starts a registry, pushes the test image and returns both.
func pushed(t *testing.T) (*testenv.Registry, *testimage.Image, string) {
	t.Helper()
	img := testImage(t)
	reg := testenv.StartRegistry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := reg.Host() + "/rhyssullivan/executor-selfhost:v1.5.12"
	idx, err := testimage.Push(ctx, img.Dir, ref)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return reg, img, ref + "@" + idx.String()
}

func waitHealthy(t *testing.T, port int, timeout time.Duration) {
	t.Helper()
	timeout = slow(t, timeout)
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/health", port))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.Contains(string(body), `"status"`) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/api/health did not answer 200 within %s (last error %v)", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestInstallAndRun(t *testing.T) {
	requireE2E(t)
	reg, img, ref := pushed(t)
	plat := platform(t)
	b := newBox(t, reg, ref, map[string]string{plat: img.Manifests[plat].String()}, "")

	// Cold install.
	r := b.hbx("install")
	if r.code != 0 {
		t.Fatalf("hbx install = %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	t.Logf("cold install took %s", r.took)
	if got, want := b.current(), "releases/"+img.Manifests[plat].Encoded(); got != want {
		t.Fatalf("current -> %q, want %q", got, want)
	}
	rootfs := filepath.Join(b.runtimeDir, "current", "rootfs")
	if _, err := os.Lstat(filepath.Join(rootfs, "usr/local/bin/bun")); err != nil {
		t.Errorf("bun missing from the rootfs: %v", err)
	}
	var meta struct {
		IndexDigest    string `json:"index_digest"`
		ManifestDigest string `json:"manifest_digest"`
	}
	mb, err := os.ReadFile(filepath.Join(b.runtimeDir, "current", "release.json"))
	if err != nil || json.Unmarshal(mb, &meta) != nil || meta.IndexDigest != img.IndexDigest.String() {
		t.Errorf("release.json = %s, %v; want index %s", mb, err, img.IndexDigest)
	}
	// install.keep_blobs (default): the store holds the installed
	// platform's blobs, as fetched.
	if got, want := storeBlobs(t, b.runtimeDir), union(imageBlobs(t, img, plat)); !slices.Equal(got, want) {
		t.Errorf("blob store after activation %v, want the image's blobs %v", got, want)
	}

	// Warm install with the registry gone: no network, same release.
	if err := reg.Stop(); err != nil {
		t.Fatal(err)
	}
	r = b.hbx("install")
	if r.code != 0 {
		t.Fatalf("warm hbx install without a registry = %d\n%s", r.code, r.stderr)
	}
	t.Logf("warm install took %s", r.took)

	// Run it twice: state persists in the data dir.
	for round := 1; round <= 2; round++ {
		runOnce(t, b, round)
	}
}

func runOnce(t *testing.T, b *box, round int) {
	t.Helper()
	cmd := exec.Command(binary(t), "--config", b.config, "run", "executor")
	cmd.Env = cleanEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	}()
	waitHealthy(t, b.port, 30*time.Second)

	base := fmt.Sprintf("http://127.0.0.1:%d", b.port)
	resp, err := http.Post(base+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") {
		t.Errorf("POST /mcp without a key = %d %q, want 401 with a Bearer challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if !strings.Contains(resp.Header.Get("WWW-Authenticate"), fmt.Sprintf("http://localhost:%d/", b.port)) {
		t.Errorf("challenge %q does not carry the host-side base URL", resp.Header.Get("WWW-Authenticate"))
	}
	// The payload sees what hbx promised it.
	resp, err = http.Get(base + "/api/hbxtest/info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Env map[string]string `json:"env"`
	}
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	for k, want := range map[string]string{"EXECUTOR_HOST": "127.0.0.1", "EXECUTOR_DATA_DIR": b.dataDir,
		"EXECUTOR_ALLOW_LOCAL_NETWORK": "false", "BUN_FEATURE_FLAG_DISABLE_IPV6": "1", "PORT": strconv.Itoa(b.port)} {
		if info.Env[k] != want {
			t.Errorf("payload env %s = %q, want %q", k, info.Env[k], want)
		}
	}
	// Nothing but loopback answers.
	if addrs := nonLoopbackAddrs(); len(addrs) > 0 {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(addrs[0], strconv.Itoa(b.port)), time.Second); err == nil {
			c.Close()
			t.Errorf("the service answers on %s, want loopback only", addrs[0])
		}
	}
	pid, err := os.ReadFile(filepath.Join(b.stateDir, "executor.pid"))
	if err != nil || strings.TrimSpace(string(pid)) == "" {
		t.Errorf("pidfile: %q, %v", pid, err)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("hbx run executor after SIGTERM = %v\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("hbx run executor did not stop after SIGTERM\n%s", out.String())
	}
	var state struct {
		Starts int `json:"starts"`
	}
	sb, err := os.ReadFile(filepath.Join(b.dataDir, "state.json"))
	if err != nil || json.Unmarshal(sb, &state) != nil || state.Starts != round {
		t.Errorf("state.json = %s, %v; want starts %d", sb, err, round)
	}
	st, err := os.Stat(b.dataDir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode = %v, %v; want 0700", st.Mode(), err)
	}
}

func nonLoopbackAddrs() []string {
	var out []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			out = append(out, ipn.IP.String())
		}
	}
	return out
}

func TestInstallRefusesE2E(t *testing.T) {
	requireE2E(t)
	reg, _, ref := pushed(t)
	plat := platform(t)
	cases := []struct {
		name     string
		ref      string
		pins     map[string]string
		extra    string
		wantCode int
		wantMsg  string
	}{
		{"pinned manifest differs", ref, map[string]string{plat: "sha256:" + strings.Repeat("0", 64)}, "", 1, "digest mismatch"},
		{"reference without digest", strings.Split(ref, "@")[0], nil, "", 2, "executor.image"},
		{"reference without tag", strings.Replace(ref, ":v1.5.12@", "@", 1), nil, "", 2, "executor.image"},
		{"index digest that is not there", strings.Split(ref, "@")[0] + "@sha256:" + strings.Repeat("1", 64), nil, "", 1, "manifest unknown"},
		{"listen address not loopback", ref, nil, "", 2, "executor.listen"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBox(t, reg, c.ref, c.pins, c.extra)
			if c.name == "listen address not loopback" {
				os.WriteFile(b.config, []byte(strings.Replace(readFile(t, b.config), "executor:\n", "executor:\n  listen: 0.0.0.0\n", 1)), 0o600)
			}
			r := b.hbx("install")
			if r.code != c.wantCode || !strings.Contains(r.stderr, c.wantMsg) {
				t.Fatalf("hbx install = %d, stderr %q; want %d containing %q", r.code, r.stderr, c.wantCode, c.wantMsg)
			}
			if b.current() != "" {
				t.Errorf("a refused install activated %s", b.current())
			}
		})
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
