package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/internal/procscan"
	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv/testproc"
	"github.com/hermesbox/hbx/release"
)

var (
	indexDigest    = digest.FromString("index")
	manifestDigest = digest.FromString("manifest")
)

// installFake lays out runtimeDir as the installer would, with a payload
// that is a shell script.
func installFake(t testing.TB, script string, cfg release.ImageConfig) (runtimeDir string) {
	t.Helper()
	runtimeDir = filepath.Join(t.TempDir(), "runtime")
	dir := filepath.Join(runtimeDir, release.ReleasesDir, manifestDigest.Encoded())
	rootfs := filepath.Join(dir, release.RootfsDir)
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := extract.New(rootfs, extract.Options{})
	if err != nil {
		t.Fatal(err)
	}
	layer := tartest.New().
		Dir("usr/local/bin", 0o755).File("usr/local/bin/payload", script, 0o755).
		Dir("app", 0o755).File("app/serve.js", "", 0o644).Dir("data", 0o755).
		Bytes()
	if err := a.Apply(bytes.NewReader(layer)); err != nil {
		t.Fatal(err)
	}
	a.Close()
	meta := release.Meta{Format: release.MetaFormat, IndexDigest: indexDigest, ManifestDigest: manifestDigest, Platform: "linux/amd64", Config: cfg}
	b, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(dir, release.MetaFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(release.ReleasesDir, manifestDigest.Encoded()), filepath.Join(runtimeDir, release.CurrentLink)); err != nil {
		t.Fatal(err)
	}
	return runtimeDir
}

func baseOptions(t *testing.T, runtimeDir string) Options {
	tmp := t.TempDir()
	return Options{
		RuntimeDir: runtimeDir, DataDir: filepath.Join(tmp, "data"), StateDir: filepath.Join(tmp, "state"),
		Listen: "127.0.0.1", Port: 4788, HostPort: 14788, DisableIPv6: true,
		Target: release.Target{IndexDigest: indexDigest, Platform: "linux/amd64"}, HostPath: "/usr/bin:/bin",
	}
}

var cfg = release.ImageConfig{
	Entrypoint: []string{"payload"},
	Cmd:        []string{"/app/serve.js", "/data/db.sqlite", "--pid", "/run/x/y.pid"},
	Env:        []string{"PATH=/usr/local/bin:/usr/bin", "EXECUTOR_HOST=0.0.0.0", "PORT=1", "EXECUTOR_DATA_DIR=/data", "NODE_ENV=production"},
	WorkingDir: "/app",
	Volumes:    []string{"/data"},
}

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func TestPrepare(t *testing.T) {
	rt := installFake(t, "#!/bin/sh\n", cfg)
	o := baseOptions(t, rt)
	o.EnvFile = filepath.Join(t.TempDir(), "executor.env")
	os.WriteFile(o.EnvFile, []byte("# secrets\nBETTER_AUTH_SECRET=s3cret\nexport QUOTED=\"a b\"\n\nNODE_ENV=staging\n"), 0o600)
	spec, err := Prepare(o)
	if err != nil {
		t.Fatal(err)
	}
	rootfs, _ := filepath.EvalSymlinks(filepath.Join(rt, "current", "rootfs"))
	env := envMap(spec.Env)
	want := map[string]string{
		"EXECUTOR_HOST": "127.0.0.1", "PORT": "4788", "EXECUTOR_DATA_DIR": o.DataDir,
		"EXECUTOR_WEB_BASE_URL": "http://localhost:14788", "EXECUTOR_ALLOW_LOCAL_NETWORK": "false",
		"BUN_FEATURE_FLAG_DISABLE_IPV6": "1", "HOME": filepath.Join(o.StateDir, "home"), "TMPDIR": filepath.Join(o.StateDir, "tmp"),
		"XDG_CACHE_HOME": filepath.Join(o.StateDir, "cache"), "BETTER_AUTH_SECRET": "s3cret", "QUOTED": "a b", "NODE_ENV": "staging",
		"PATH": filepath.Join(rootfs, "usr/local/bin") + ":/usr/bin:/bin",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if spec.Path != filepath.Join(rootfs, "usr/local/bin/payload") || spec.Dir != filepath.Join(rootfs, "app") {
		t.Errorf("Path, Dir = %s, %s", spec.Path, spec.Dir)
	}
	wantArgs := []string{"payload", filepath.Join(rootfs, "app/serve.js"), filepath.Join(o.DataDir, "db.sqlite"), "--pid", filepath.Join(o.StateDir, "root/run/x/y.pid")}
	if strings.Join(spec.Args, " ") != strings.Join(wantArgs, " ") {
		t.Errorf("Args = %q, want %q", spec.Args, wantArgs)
	}
	for _, d := range []string{o.DataDir, o.StateDir, filepath.Join(o.StateDir, "home"), filepath.Join(o.StateDir, "root/run/x")} {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("Stat(%s) = %v, %v; want mode 0700", d, st.Mode(), err)
		}
	}
}

// TestPrepareTokenFile: the key of executor.token_file reaches the
// payload in executor.token_env, over the env file's value, without the
// blanks and line end around it.
func TestPrepareTokenFile(t *testing.T) {
	rt := installFake(t, "#!/bin/sh\n", cfg)
	o := baseOptions(t, rt)
	o.EnvFile = filepath.Join(t.TempDir(), "executor.env")
	os.WriteFile(o.EnvFile, []byte("EXECUTOR_AUTH_TOKEN=from-env-file\n"), 0o600)
	o.TokenFile, o.TokenEnv = filepath.Join(t.TempDir(), "box.key"), "EXECUTOR_AUTH_TOKEN"
	os.WriteFile(o.TokenFile, []byte("  0123abcd  \nsecond line\n"), 0o600)
	spec, err := Prepare(o)
	if err != nil {
		t.Fatal(err)
	}
	if got := envMap(spec.Env)["EXECUTOR_AUTH_TOKEN"]; got != "0123abcd" {
		t.Errorf("env EXECUTOR_AUTH_TOKEN = %q, want %q", got, "0123abcd")
	}
}

// TestPrepareTelemetryOff: with DisableTelemetry the payload gets the
// three switches that turn off upstream's update check and analytics,
// over the image's Env; the env file overrides each; without it hbx sets
// none of them.
func TestPrepareTelemetryOff(t *testing.T) {
	img := cfg
	img.Env = append(append([]string(nil), cfg.Env...), "EXECUTOR_DISABLE_UPDATE_CHECK=0")
	rt := installFake(t, "#!/bin/sh\n", img)
	cases := []struct {
		name    string
		off     bool
		envFile string
		want    map[string]string // "" : unset
	}{
		{"default", true, "", map[string]string{"EXECUTOR_DISABLE_UPDATE_CHECK": "1", "EXECUTOR_DISABLE_ANALYTICS": "1", "DO_NOT_TRACK": "1"}},
		{"env file overrides", true, "DO_NOT_TRACK=0\nEXECUTOR_DISABLE_ANALYTICS=\n",
			map[string]string{"EXECUTOR_DISABLE_UPDATE_CHECK": "1", "EXECUTOR_DISABLE_ANALYTICS": "", "DO_NOT_TRACK": "0"}},
		{"off", false, "", map[string]string{"EXECUTOR_DISABLE_UPDATE_CHECK": "0", "EXECUTOR_DISABLE_ANALYTICS": "<unset>", "DO_NOT_TRACK": "<unset>"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := baseOptions(t, rt)
			o.DisableTelemetry = c.off
			if c.envFile != "" {
				o.EnvFile = filepath.Join(t.TempDir(), "executor.env")
				if err := os.WriteFile(o.EnvFile, []byte(c.envFile), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			spec, err := Prepare(o)
			if err != nil {
				t.Fatal(err)
			}
			env := envMap(spec.Env)
			for k, want := range c.want {
				got, ok := env[k]
				if !ok {
					got = "<unset>"
				}
				if got != want {
					t.Errorf("env %s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

// TestPrepareEmptiesTMPDIR: each Prepare empties the payload's TMPDIR
// (what a run left there, workerd's directories among it) and keeps it
// 0700; a symlink left inside is removed, never followed; a symlink in
// TMPDIR's place is refused and what it points to stays.
func TestPrepareEmptiesTMPDIR(t *testing.T) {
	rt := installFake(t, "#!/bin/sh\n", cfg)
	o := baseOptions(t, rt)
	if _, err := Prepare(o); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(o.StateDir, "tmp")
	outside := filepath.Join(t.TempDir(), "keep")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tmp, "executor-workerd-42-abc/sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "executor-workerd-42-abc/sub/f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(tmp, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(o); err != nil {
		t.Fatalf("Prepare() again = %v", err)
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
		t.Errorf("ReadDir(TMPDIR) after Prepare = %v, %v; want empty", left, err)
	}
	if st, err := os.Lstat(tmp); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Errorf("Lstat(TMPDIR) = %v, %v; want a 0700 directory", st, err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("Stat(target of a link in TMPDIR) = %v; want it untouched", err)
	}
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(outside)
	if err := os.Symlink(dir, tmp); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(o); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("Prepare(TMPDIR a symlink) = %v, want it refused", err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("Stat(file behind a symlinked TMPDIR) = %v; want it untouched", err)
	}
}

func TestPrepareRefuses(t *testing.T) {
	rt := installFake(t, "#!/bin/sh\n", cfg)
	cases := []struct {
		name    string
		mut     func(*Options)
		wantErr error
		wantMsg string
	}{
		{"no release", func(o *Options) { o.RuntimeDir = t.TempDir() }, ErrNotInstalled, "hbx install"},
		{"other index digest", func(o *Options) { o.IndexDigest = digest.FromString("other") }, ErrNotInstalled, "configured"},
		{"other platform", func(o *Options) { o.Platform = "linux/arm64" }, ErrNotInstalled, "platform"},
		{"pinned manifest differs", func(o *Options) { o.ManifestDigest = digest.FromString("x") }, ErrNotInstalled, "pinned"},
		{"env file readable by others", func(o *Options) {
			o.EnvFile = filepath.Join(t.TempDir(), "env")
			os.WriteFile(o.EnvFile, []byte("A=1\n"), 0o644)
		}, ErrEnvFile, "0600 or stricter"},
		{"env file malformed", func(o *Options) {
			o.EnvFile = filepath.Join(t.TempDir(), "env")
			os.WriteFile(o.EnvFile, []byte("A=1\nnot a pair topsecret\n"), 0o600)
		}, ErrEnvFile, "line 2"},
		{"token file readable by others", func(o *Options) {
			o.TokenFile, o.TokenEnv = filepath.Join(t.TempDir(), "key"), "EXECUTOR_AUTH_TOKEN"
			os.WriteFile(o.TokenFile, []byte("topsecret\n"), 0o640)
		}, ErrTokenFile, "must be 0600 or stricter"},
		{"token file empty", func(o *Options) {
			o.TokenFile, o.TokenEnv = filepath.Join(t.TempDir(), "key"), "EXECUTOR_AUTH_TOKEN"
			os.WriteFile(o.TokenFile, []byte("\n"), 0o600)
		}, ErrTokenFile, "not one key"},
		{"token file two words", func(o *Options) {
			o.TokenFile, o.TokenEnv = filepath.Join(t.TempDir(), "key"), "EXECUTOR_AUTH_TOKEN"
			os.WriteFile(o.TokenFile, []byte("topsecret topsecret\n"), 0o600)
		}, ErrTokenFile, "not one key"},
		{"token file not ASCII", func(o *Options) {
			// A header carries it to Bun as Latin-1, the environment as
			// UTF-8: Executor and hbx health would see two keys.
			o.TokenFile, o.TokenEnv = filepath.Join(t.TempDir(), "key"), "EXECUTOR_AUTH_TOKEN"
			os.WriteFile(o.TokenFile, []byte("topsecretключ\n"), 0o600)
		}, ErrTokenFile, "not one key"},
		{"token file no-break space", func(o *Options) {
			o.TokenFile, o.TokenEnv = filepath.Join(t.TempDir(), "key"), "EXECUTOR_AUTH_TOKEN"
			os.WriteFile(o.TokenFile, []byte("topsecret topsecret\n"), 0o600)
		}, ErrTokenFile, "not one key"},
		{"token file a FIFO", func(o *Options) {
			o.TokenFile, o.TokenEnv = filepath.Join(t.TempDir(), "key"), "EXECUTOR_AUTH_TOKEN"
			if err := syscall.Mkfifo(o.TokenFile, 0o600); err != nil {
				t.Fatal(err)
			}
		}, ErrTokenFile, "FIFO"},
		{"token file huge", func(o *Options) {
			o.TokenFile, o.TokenEnv = filepath.Join(t.TempDir(), "key"), "EXECUTOR_AUTH_TOKEN"
			os.WriteFile(o.TokenFile, []byte("topsecret"+strings.Repeat("a", 80<<10)+"\n"), 0o600)
		}, ErrTokenFile, "larger than 65536 bytes"},
		{"token file key too long for a header", func(o *Options) {
			o.TokenFile, o.TokenEnv = filepath.Join(t.TempDir(), "key"), "EXECUTOR_AUTH_TOKEN"
			os.WriteFile(o.TokenFile, []byte("topsecret"+strings.Repeat("a", 8<<10)+"\n"), 0o600)
		}, ErrTokenFile, "not one key"},
		{"token file missing", func(o *Options) {
			o.TokenFile, o.TokenEnv = filepath.Join(t.TempDir(), "key"), "EXECUTOR_AUTH_TOKEN"
		}, ErrTokenFile, "no such file"},
		{"unknown user", func(o *Options) { o.User = "no-such-user-hbx" }, nil, `executor.user: user "no-such-user-hbx"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := baseOptions(t, rt)
			c.mut(&o)
			_, err := Prepare(o)
			if err == nil || (c.wantErr != nil && !errors.Is(err, c.wantErr)) || !strings.Contains(err.Error(), c.wantMsg) {
				t.Fatalf("Prepare() = %v; want %v containing %q", err, c.wantErr, c.wantMsg)
			}
			if strings.Contains(err.Error(), "topsecret") {
				t.Errorf("error %q quotes the env file", err)
			}
		})
	}
}

// TestRunReturnsWhileOutputHeld: a payload that exits while a process it
// left (in its group, or in a session of its own that holds the marker)
// still holds its stdout makes Run return soon after the exit, with the
// payload's status, and that process is killed; Run never hangs on it.
func TestRunReturnsWhileOutputHeld(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name, spawn string
		code        int
	}{
		{"in its group, exit 0", "sleep 1000 &", 0},
		{"in its group, exit 3", "sleep 1000 &", 3},
		{"new session, exit 0", "setsid sleep 1000 &", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pids := filepath.Join(t.TempDir(), "pids")
			// In the left process's environment: it is killed by it, never by
			// a bare pid that may name another process by then.
			mark := "HBXTEST_MARK=" + pids
			kill := func(pid int) {
				procscan.Signal(pid, syscall.SIGKILL, func(pid int) bool { return testproc.HasEnv(pid, mark) })
			}
			rt := installFake(t, "#!/bin/sh\n"+mark+" "+tc.spawn+"\necho $! > "+pids+"\necho started\nexit "+strconv.Itoa(tc.code)+"\n", cfg)
			spec, err := Prepare(baseOptions(t, rt))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			done := make(chan error, 1)
			go func() { done <- Run(context.Background(), spec, &out, io.Discard, log) }()
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				if b, _ := os.ReadFile(pids); len(b) > 0 {
					if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 {
						kill(pid) // lets the hung Run return
					}
				}
				t.Fatal("Run() still waits 60 s after the payload exited: a process it left holds its stdout")
			}
			var ee *ExitError
			if tc.code == 0 && err != nil || tc.code != 0 && (!errors.As(err, &ee) || ee.Code != tc.code) {
				t.Errorf("Run() = %v, want exit status %d", err, tc.code)
			}
			if !strings.Contains(out.String(), "started") {
				t.Errorf("payload printed %q", out.String())
			}
			b, _ := os.ReadFile(pids)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if pid <= 0 {
				t.Fatalf("no pid recorded: %q", b)
			}
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if syscall.Kill(pid, 0) != nil || isZombie(pid) {
					break
				}
				if time.Now().After(deadline) {
					kill(pid)
					t.Fatalf("the process %d the payload left still runs after Run returned", pid)
				}
			}
		})
	}
}

// isZombie reports whether pid has exited but is not reaped yet.
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := strings.LastIndexByte(string(b), ')')
	return err == nil && i > 0 && len(b) > i+2 && b[i+2] == 'Z'
}

func TestRunExitStatusAndSignals(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	t.Run("exit status", func(t *testing.T) {
		rt := installFake(t, "#!/bin/sh\necho \"$EXECUTOR_HOST:$PORT $1\"\nexit 3\n", cfg)
		spec, err := Prepare(baseOptions(t, rt))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err = Run(context.Background(), spec, &out, io.Discard, log)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != 3 {
			t.Fatalf("Run() = %v, want exit status 3", err)
		}
		if !strings.HasPrefix(out.String(), "127.0.0.1:4788 /") {
			t.Errorf("payload printed %q", out.String())
		}
		if _, err := os.Stat(spec.PidFile); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pidfile left after exit: %v", err)
		}
	})
	t.Run("stop on cancel", func(t *testing.T) {
		// The payload says when its trap is set and its child runs a
		// program of its own (a fork that has not exec'd yet still has the
		// shell's trap and would swallow the SIGTERM, then hold stdout open
		// for 30s): a loaded machine may take long to get there after the
		// pidfile appears.
		trapped := filepath.Join(t.TempDir(), "trapped")
		rt := installFake(t, "#!/bin/sh\ntrap 'echo stopping; exit 0' TERM\nsh -c ': > "+trapped+"; exec sleep 30' &\nwait\n", cfg)
		spec, err := Prepare(baseOptions(t, rt))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var out bytes.Buffer
		done := make(chan error, 1)
		go func() { done <- Run(ctx, spec, &out, io.Discard, log) }()
		deadline := time.Now().Add(30 * time.Second)
		for {
			b, err := os.ReadFile(spec.PidFile)
			if _, terr := os.Stat(trapped); err == nil && len(b) > 0 && terr == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("pidfile or the payload's trap never appeared")
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run() after cancel = %v, want nil (payload exited 0)", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run() did not return after cancel")
		}
		if !strings.Contains(out.String(), "stopping") {
			t.Errorf("payload did not get SIGTERM: %q", out.String())
		}
	})
}
