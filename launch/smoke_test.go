package launch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testenv/testproc"
	"github.com/hermesbox/hbx/release"
)

func TestSmoke(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	spec := func(script string) *Spec {
		return &Spec{Path: "/bin/sh", Args: []string{"sh", "-c", script}, Dir: dir, Env: []string{"PATH=/usr/bin:/bin", "HBXTEST_SMOKE=yes"}}
	}
	ctx := context.Background()
	if err := Smoke(ctx, spec(`test "$HBXTEST_SMOKE" = yes && test "$PWD" = `+dir), 30*time.Second); err != nil {
		t.Errorf("Smoke(env and dir) = %v, want nil", err)
	}
	err := Smoke(ctx, spec("echo; echo '  it broke  '; echo more; exit 3"), 30*time.Second)
	if err == nil || err.Error() != `smoke command "sh -c echo; echo '  it broke  '; echo more; exit 3" exited 3: it broke` {
		t.Errorf("Smoke(exit 3) = %v", err)
	}
	start := time.Now()
	err = Smoke(ctx, spec("sleep 300 & echo $! > "+pidFile+"; sleep 300"), 500*time.Millisecond)
	if err == nil || !strings.HasSuffix(err.Error(), "did not finish within 500ms") {
		t.Errorf("Smoke(sleep) = %v, want did not finish within 500ms", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("Smoke(sleep) took %s", took)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(20 * time.Second)
	for syscall.Kill(pid, 0) == nil && !zombie(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the smoke command's background child %d outlived it", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := Smoke(cctx, spec("true"), time.Second); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("Smoke(canceled) = %v, want the context's error", err)
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// TestSmokeDaemonGone: a smoke command that starts a daemon in a new
// session (setsid: out of the process group Smoke kills) and exits 0, as a
// wrapper that starts the server whatever its arguments would, leaves
// nothing running once Smoke returns: the daemon would otherwise hold the
// port and write the data directory without its lock.
func TestSmokeDaemonGone(t *testing.T) {
	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		testenv.Missing(t, "setsid(1) is not installed (apt-get install util-linux)")
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "daemon.pid")
	mark := "HBXTEST_MARK=" + dir // in the daemon's environment, to kill it by at the end
	spec := &Spec{Path: "/bin/sh", Args: []string{"sh", "-c", "setsid sh -c 'echo $$ > " + pidFile + "; exec sleep 300' </dev/null >/dev/null 2>&1 & " +
		"while ! test -s " + pidFile + "; do sleep 0.05; done; exit 0"}, Dir: dir, Env: []string{"PATH=/usr/bin:/bin", mark}}
	if err := Smoke(context.Background(), spec, 60*time.Second); err != nil {
		t.Fatalf("Smoke() = %v, want nil", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatalf("daemon pid %q", b)
	}
	testproc.KillMarkedAtEnd(t, pid, mark)
	if syscall.Kill(pid, 0) == nil && !zombie(pid) {
		t.Fatalf("the smoke command's daemon %d (its own session) outlived Smoke", pid)
	}
}

// TestRunDaemonGone: a payload that starts a daemon in a new session
// (out of the process group Run kills) and exits leaves nothing running
// once Run returns: the daemon would hold the port and write the data
// directory after `hbx run executor` said the payload was gone.
func TestRunDaemonGone(t *testing.T) {
	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		testenv.Missing(t, "setsid(1) is not installed (apt-get install util-linux)")
	}
	// $4 is the mapped --pid /run/x/y.pid: a file in the state directory.
	mark := fmt.Sprintf("HBXTEST_MARK=%d", time.Now().UnixNano()) // in the daemon's environment, to kill it by at the end
	rt := installFake(t, "#!/bin/sh\n"+mark+" setsid sh -c 'echo $$ > \"$0\"; exec sleep 300' \"$4\" </dev/null >/dev/null 2>&1 &\n"+
		"while ! test -s \"$4\"; do sleep 0.05; done\nexit 0\n", cfg)
	spec, err := Prepare(baseOptions(t, rt))
	if err != nil {
		t.Fatal(err)
	}
	if err := Run(context.Background(), spec, io.Discard, io.Discard, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}
	b, err := os.ReadFile(spec.Args[4])
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatalf("daemon pid %q", b)
	}
	testproc.KillMarkedAtEnd(t, pid, mark)
	if syscall.Kill(pid, 0) == nil && !zombie(pid) {
		t.Fatalf("the payload's daemon %d (its own session) outlived Run", pid)
	}
}

// TestSmokeScratchLeavesLiveDataAlone: install.smoke_command used to run with
// EXECUTOR_DATA_DIR set to the live data directory and without its lock,
// so while the payload runs (it holds the data lock) an `hbx install` of
// a new release ran the smoke command on the payload's data: the issue's
// own example, a wrapper that starts the server whatever its arguments,
// opened Executor's database beside the running Executor (two writers,
// what "One writer per data directory" forbids) and competed for its
// port. It now gets a scratch data and state directory and a free port:
// the command runs, and nothing appears in the live data directory. An
// env file naming the live data directory, port and another host (it
// comes after hbx's settings; all addresses on the Docker box, where
// executor.exposure is network) changes none of that.
func TestSmokeScratchLeavesLiveDataAlone(t *testing.T) {
	for _, tc := range []struct {
		name, envFile string // envFile: its lines, %s the live data directory
		network       bool
	}{
		{name: "no env file"},
		{name: "an env file naming the live data, port and another loopback address", envFile: "EXECUTOR_DATA_DIR=%s\nPORT=4788\nEXECUTOR_HOST=127.0.0.2\n"},
		{name: "network exposure: an env file naming the live data, port and all addresses", envFile: "EXECUTOR_DATA_DIR=%s\nPORT=4788\nEXECUTOR_HOST=0.0.0.0\n", network: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			smokeScratchLeavesLiveDataAlone(t, tc.envFile, tc.network)
		})
	}
}

func smokeScratchLeavesLiveDataAlone(t *testing.T, envFile string, network bool) {
	t.Helper()
	dir := t.TempDir()
	o := Options{
		RuntimeDir: filepath.Join(dir, "runtime"), DataDir: filepath.Join(dir, "workspace/data"), StateDir: filepath.Join(dir, "state"),
		Listen: "127.0.0.1", Port: 4788, HostPort: 4788, HostPath: "/usr/bin:/bin", Network: network,
	}
	if envFile != "" {
		o.EnvFile = filepath.Join(dir, "executor.env")
		if err := os.WriteFile(o.EnvFile, []byte(fmt.Sprintf(envFile, o.DataDir)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rel := filepath.Join(dir, "release")
	bin := filepath.Join(rel, release.RootfsDir, "usr/local/bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "smoke"), []byte("#!/bin/sh\ntouch \"$EXECUTOR_DATA_DIR/smoke-was-here\" && echo \"$EXECUTOR_DATA_DIR $PORT $EXECUTOR_HOST\" > "+filepath.Join(dir, "seen")+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	inst := &release.Installed{Dir: rel, Meta: release.Meta{Config: release.ImageConfig{
		Cmd: []string{"smoke"}, WorkingDir: "/", Env: []string{"PATH=/usr/local/bin"},
	}}}
	// The running payload's lock.
	l, err := datalock.Acquire(context.Background(), o.DataDir, datalock.Options{Command: "hbx run executor (test)"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if err := SmokeScratch(context.Background(), o, inst, []string{"smoke"}, time.Minute); err != nil {
		t.Fatalf("smoke command: %v", err)
	}
	if _, err := os.Stat(filepath.Join(o.DataDir, "smoke-was-here")); err == nil {
		t.Fatal("the smoke command wrote the live data directory while the running payload held its lock")
	}
	seen, err := os.ReadFile(filepath.Join(dir, "seen"))
	if err != nil {
		t.Fatalf("the smoke command did not run: %v", err)
	}
	var data, host string
	var port int
	if _, err := fmt.Sscan(string(seen), &data, &port, &host); err != nil || data == o.DataDir || port == o.Port || host != o.Listen {
		t.Errorf("smoke command saw EXECUTOR_DATA_DIR PORT EXECUTOR_HOST = %q; want a scratch directory, another port than %d, %s", seen, o.Port, o.Listen)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("scratch data directory %s left after the smoke command: %v", data, err)
	}
}
