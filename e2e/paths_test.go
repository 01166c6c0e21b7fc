package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
	"github.com/hermesbox/hbx/supervisor"
)

// poison is a host environment the payload must never see: Executor falls
// back to URL, HOST and PORT when its own variables are unset, and Bun
// and Node read BUN_* and NODE_OPTIONS.
var poison = []string{
	"URL=http://evil.example", "HOST=evil.example", "PORT=1", "EXECUTOR_HOST=0.0.0.0",
	"EXECUTOR_WEB_BASE_URL=http://evil.example", "EXECUTOR_ALLOW_LOCAL_NETWORK=true", "EXECUTOR_POISON=1",
	"BUN_POISON=1", "BUN_OPTIONS=--inspect", "NODE_OPTIONS=--require=/evil.js", "HOSTNAME=evil",
	"PATH=/evil/bin:" + os.Getenv("PATH"), "HOME=/evil", "LD_PRELOAD=/evil.so",
}

// argsImage pushes a test image whose Cmd ends with args, for the host's
// platform under test alone, and returns its pinned reference.
func argsImage(t *testing.T, args ...string) (*testenv.Registry, string) {
	t.Helper()
	tarballs, err := testimage.BunTarballs(testenv.RepoRoot(t))
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("test image: %v", err))
	}
	img, err := testimage.BuildLayout(t.TempDir(), testimage.Options{BunTarballs: tarballs,
		Platforms: []string{platform(t)}, ExtraArgs: args})
	if err != nil {
		t.Fatal(err)
	}
	reg := testenv.StartRegistry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := reg.Host() + "/rhyssullivan/executor-selfhost:v1.5.12"
	idx, err := testimage.Push(ctx, img.Dir, ref)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return reg, ref + "@" + idx.String()
}

// payloadInfo is what the test server's /api/hbxtest/info says.
type payloadInfo struct {
	Pid     int               `json:"pid"`
	Argv    []string          `json:"argv"`
	EnvKeys []string          `json:"envKeys"`
	Env     map[string]string `json:"env"`
}

func getInfo(t *testing.T, port int) payloadInfo {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/hbxtest/info", port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info payloadInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	return info
}

// checkPayload: the environment is exactly the image's Env, hbx's
// settings and the env file; the --pid argument was written in the state
// directory, never on the host's /run.
func checkPayload(t *testing.T, b *box, info payloadInfo, hostPid string) {
	t.Helper()
	allowed := []string{
		// the image's Env
		"PATH", "BUN_RUNTIME_TRANSPILER_CACHE_PATH", "BUN_INSTALL_BIN", "EXECUTOR_HOST", "PORT", "EXECUTOR_DATA_DIR", "NODE_ENV",
		// hbx's settings
		"EXECUTOR_WEB_BASE_URL", "EXECUTOR_ALLOW_LOCAL_NETWORK", "BUN_FEATURE_FLAG_DISABLE_IPV6",
		// ... egress off (executor.disable_telemetry)
		"EXECUTOR_DISABLE_UPDATE_CHECK", "EXECUTOR_DISABLE_ANALYTICS", "DO_NOT_TRACK",
		"HOME", "TMPDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "USER", "LOGNAME",
		// the env file
		"FROM_ENV_FILE",
		// the image's docker-entrypoint.sh (the host's /bin/sh) may export its own
		"PWD", "OLDPWD", "SHLVL", "_",
	}
	for _, k := range info.EnvKeys {
		// `bun run` sets NODE and npm_* itself, as npm does for scripts.
		if !slices.Contains(allowed, k) && k != "NODE" && !strings.HasPrefix(k, "npm_") {
			t.Errorf("payload environment has %s: not the image's, hbx's or the env file's", k)
		}
	}
	for k, want := range map[string]string{
		"EXECUTOR_HOST": "127.0.0.1", "PORT": strconv.Itoa(b.port), "EXECUTOR_ALLOW_LOCAL_NETWORK": "false",
		"EXECUTOR_WEB_BASE_URL": fmt.Sprintf("http://localhost:%d", b.port), "HOME": filepath.Join(b.stateDir, "home"),
	} {
		if info.Env[k] != want {
			t.Errorf("payload env %s = %q, want %q", k, info.Env[k], want)
		}
	}
	if p := info.Env["PATH"]; strings.Contains(p, "/evil") || !strings.HasSuffix(p, ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") {
		t.Errorf("payload PATH = %q; want the rootfs dirs then the standard system dirs, nothing of the caller's", p)
	}
	if !slices.Contains(info.EnvKeys, "FROM_ENV_FILE") {
		t.Errorf("the env file's variable did not arrive: %v", info.EnvKeys)
	}
	statePid := filepath.Join(b.stateDir, "root", strings.TrimPrefix(hostPid, "/"))
	if !slices.Contains(info.Argv, statePid) {
		t.Errorf("payload argv = %q; want --pid mapped to %s", info.Argv, statePid)
	}
	got, err := os.ReadFile(statePid)
	if err != nil || strings.TrimSpace(string(got)) != strconv.Itoa(info.Pid) {
		t.Errorf("pidfile in the state directory: %q, %v; want %d", got, err, info.Pid)
	}
	if _, err := os.Lstat(hostPid); err == nil {
		t.Errorf("the payload wrote the host's %s", hostPid)
	}
}

// TestPayloadIsolatedFromHost: an image whose command says `--pid
// /run/<x>.pid` writes that file into the state directory, never the
// host's /run; a poisoned host environment (URL, HOST, PORT, EXECUTOR_*,
// BUN_*, NODE_OPTIONS, PATH) reaches neither `hbx run executor` nor
// `hbx supervise`'s payload; a data directory that comes up 0755 (a
// Docker named volume) is made 0700 at start, and the supervisor says so.
func TestPayloadIsolatedFromHost(t *testing.T) {
	requireE2E(t)
	hostPid := fmt.Sprintf("/run/hbxtest-%d-%d.pid", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { os.Remove(hostPid) })
	reg, ref := argsImage(t, "--pid", hostPid)
	envFile := filepath.Join(t.TempDir(), "executor.env")
	if err := os.WriteFile(envFile, []byte("FROM_ENV_FILE=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := newBox(t, reg, ref, nil, "")
	// executor: is the config's first section; env_file goes with it.
	body, _ := os.ReadFile(b.config)
	if err := os.WriteFile(b.config, []byte(strings.Replace(string(body), "executor:\n", "executor:\n  env_file: "+envFile+"\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install = %d\n%s", r.code, r.stderr)
	}

	t.Run("run executor", func(t *testing.T) {
		cmd := exec.Command(binary(t), "--config", b.config, "run", "executor")
		cmd.Env = append(cleanEnv(), poison...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		defer func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
			}
			if t.Failed() {
				t.Logf("hbx run executor output:\n%s", out.String())
			}
		}()
		waitHealthy(t, b.port, 60*time.Second)
		checkPayload(t, b, getInfo(t, b.port), hostPid)
	})

	t.Run("supervise", func(t *testing.T) {
		// A Docker named volume comes up root's and 0755.
		if err := os.Chmod(b.dataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(b.stateDir, "root", strings.TrimPrefix(hostPid, "/")))
		socket, dir := supervisorConfig(t, b, "")
		s := startSupervise(t, b, socket, dir, append([]string{"env"}, poison...)...)
		s.waitStates(90*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
		checkPayload(t, b, getInfo(t, b.port), hostPid)
		st, err := os.Stat(b.dataDir)
		if err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("data dir after start: %v, %v; want mode 0700", st.Mode(), err)
		}
		log, _ := os.ReadFile(s.log)
		if !strings.Contains(string(log), "directory made private to executor.user") || !strings.Contains(string(log), b.dataDir+": mode 0755 -> 0700") {
			t.Errorf("supervise log does not say the data directory was made private:\n%s", log)
		}
	})
}

// TestBinaryDirTrusted: hbx refuses to run from a directory that a user
// other than root can write (it could swap the binary the box's bootstrap
// and the Compose healthcheck run), naming the directory, its owner and
// mode; from a root-only directory the same binary runs.
func TestBinaryDirTrusted(t *testing.T) {
	requireE2E(t)
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root")
	}
	src, err := os.ReadFile(binary(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		mode os.FileMode
		uid  int
		want string
	}{
		{"root only", 0o755, 0, ""},
		{"world-writable", 0o777, 0, "is owned by root:root with mode 0777, writable by others"},
		{"another user's", 0o755, 65534, "is owned by nobody:"},
	} {
		bin := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
		if err := os.Mkdir(bin, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, "hbx"), src, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(bin, c.mode)
		os.Chown(bin, c.uid, c.uid)
		cmd := exec.Command(filepath.Join(bin, "hbx"), "config", "show")
		cmd.Env = append(cleanEnv(), "HBX_EXECUTOR_RUNTIME_DIR="+filepath.Join(dir, "rt"))
		out, err := cmd.CombinedOutput()
		code := cmd.ProcessState.ExitCode()
		if c.want == "" {
			if strings.Contains(string(out), "untrusted") {
				t.Errorf("%s: %v\n%s", c.name, err, out)
			}
			continue
		}
		if code != 2 || !strings.Contains(string(out), "the hbx binary's directory "+bin+": "+bin+" "+c.want) {
			t.Errorf("%s: exit %d\n%s\nwant exit 2 naming %s %s", c.name, code, out, bin, c.want)
		}
	}
}

// TestInstallRefusesHostPathArg: an image whose command names a host path
// outside the volume, the writable directories and the release is refused
// at validation, naming the argument, and nothing is activated.
func TestInstallRefusesHostPathArg(t *testing.T) {
	requireE2E(t)
	reg, ref := argsImage(t, "--config=/etc/executor/config.json")
	b := newBox(t, reg, ref, nil, "")
	r := b.hbx("install")
	if r.code == 0 || !strings.Contains(r.stderr, `"--config=/etc/executor/config.json" names /etc/executor/config.json, which is not under a volume (/data), a writable directory (/run, /tmp, /var) or in the release`) {
		t.Fatalf("hbx install = %d\n%s\nwant refused naming the argument", r.code, r.stderr)
	}
	if cur := b.current(); cur != "" {
		t.Errorf("a refused release was activated: current -> %s", cur)
	}
}
