package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
	"github.com/hermesbox/hbx/supervisor"
)

// Images of upstream's other shapes (testimage.Options.Shape), built once
// per run for the platform under test only.
var (
	shapesMu sync.Mutex
	shapes   = map[string]*testimage.Image{}
)

func shapeImage(t *testing.T, shape string) *testimage.Image {
	t.Helper()
	shapesMu.Lock()
	defer shapesMu.Unlock()
	if img := shapes[shape]; img != nil {
		return img
	}
	tarballs, err := testimage.BunTarballs(testenv.RepoRoot(t))
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("test image: %v", err))
	}
	dir, err := runTempDir("hbx-e2e-image-" + shape + "-")
	if err != nil {
		t.Fatal(err)
	}
	img, err := testimage.BuildLayout(dir, testimage.Options{BunTarballs: tarballs, Shape: shape, Platforms: []string{platform(t)}})
	if err != nil {
		t.Fatal(err)
	}
	shapes[shape] = img
	return img
}

// pushedShape starts a registry and pushes the image of shape to it.
func pushedShape(t *testing.T, shape string) (*testenv.Registry, *testimage.Image, string) {
	t.Helper()
	img := shapeImage(t, shape)
	reg := testenv.StartRegistry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := reg.Host() + "/rhyssullivan/executor-selfhost:v1.5.17-" + shape
	idx, err := testimage.Push(ctx, img.Dir, ref)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return reg, img, ref + "@" + idx.String()
}

// TestUpstreamShapes: the wrapper-entry image (Cmd ["executor-web"], a
// script that starts the server whatever its arguments) and the
// distroless image (no shell at all, Bun started on the bundled server)
// install with default settings, run under `hbx run executor` and `hbx
// supervise`, and pass `hbx health`, as the Debian shape does.
func TestUpstreamShapes(t *testing.T) {
	requireE2E(t)
	for _, c := range []struct {
		shape string
		cmd   []string
	}{
		{testimage.ShapeWrapper, []string{"executor-web"}},
		{testimage.ShapeDistroless, []string{"bun", "run", "dist-server/serve.js"}},
	} {
		t.Run(c.shape, func(t *testing.T) {
			reg, img, ref := pushedShape(t, c.shape)
			plat := platform(t)
			b := newBox(t, reg, ref, map[string]string{plat: img.Manifests[plat].String()}, "")
			r := b.hbx("install") // install.* at their defaults
			if r.code != 0 {
				t.Fatalf("hbx install = %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			if r.took > 30*time.Second {
				t.Errorf("hbx install took %s", r.took)
			}
			var meta struct {
				Config struct {
					Entrypoint []string `json:"entrypoint"`
					Cmd        []string `json:"cmd"`
				} `json:"config"`
			}
			if err := json.Unmarshal([]byte(readFile(t, filepath.Join(b.runtimeDir, "current/release.json"))), &meta); err != nil {
				t.Fatal(err)
			}
			if len(meta.Config.Entrypoint) != 0 || !slices.Equal(meta.Config.Cmd, c.cmd) {
				t.Fatalf("installed release runs %q %q, want no entrypoint and %q", meta.Config.Entrypoint, meta.Config.Cmd, c.cmd)
			}
			if c.shape == testimage.ShapeDistroless {
				for _, sh := range []string{"bin/sh", "usr/local/bin/docker-entrypoint.sh"} {
					if _, err := os.Lstat(filepath.Join(b.runtimeDir, "current/rootfs", sh)); err == nil {
						t.Errorf("the distroless rootfs has /%s", sh)
					}
				}
			}

			runOnce(t, b, 1)

			socket, dir := supervisorConfig(t, b, "")
			s := startSupervise(t, b, socket, dir)
			healthyAt(t, b.port, 60*time.Second)
			s.waitStates(30*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
			if h := b.hbx("health"); h.code != 0 {
				t.Errorf("hbx health = %d\n%s%s", h.code, h.stdout, h.stderr)
			}
			if st := readState(t, b.dataDir); st.Starts != 2 {
				t.Errorf("state.json starts = %d, want 2 (hbx run, then hbx supervise)", st.Starts)
			}
		})
	}
}

// TestSmokeCommand: install.smoke_command runs inside the staged release
// as the payload would run (its PATH, working directory and environment);
// a failure or a timeout refuses the release, says so, activates nothing
// and leaves nothing running.
func TestSmokeCommand(t *testing.T) {
	requireE2E(t)
	reg, _, ref := pushedShape(t, testimage.ShapeWrapper)
	for _, c := range []struct {
		name, smoke, timeout string
		want                 string // "" installs
	}{
		{name: "pass", smoke: `[bun, --version]`},
		// As the payload runs, but on a scratch data directory (never the
		// live one: the payload may be running) and another port.
		{name: "as the payload runs", smoke: `[bun, -e, "const fs = require('fs'); const d = process.env.EXECUTOR_DATA_DIR; const want = [d !== process.env.HBXTEST_LIVE && fs.statSync(d).isDirectory(), process.env.PORT !== process.env.HBXTEST_PORT, process.env.EXECUTOR_HOST, process.env.EXECUTOR_ALLOW_LOCAL_NETWORK, process.cwd().endsWith('/rootfs/app/apps/host-selfhost')].join(' '); if (want !== process.env.HBXTEST_WANT) { console.error('got ' + want); process.exit(4) }"]`},
		{name: "fail", smoke: `[bun, -e, "console.error('smoke says no'); process.exit(3)"]`,
			want: `validate release: smoke command "bun -e console.error('smoke says no'); process.exit(3)" exited 3: smoke says no`},
		{name: "missing program", smoke: `[no-such-smoke]`,
			want: `prepare smoke command "no-such-smoke": program "no-such-smoke": not found on the image's PATH`},
		// executor-web starts the server whatever its arguments.
		{name: "timeout", smoke: `[executor-web, --version]`, timeout: "3s",
			want: `validate release: smoke command "executor-web --version" did not finish within 3s`},
	} {
		t.Run(c.name, func(t *testing.T) {
			timeout := c.timeout
			if timeout == "" {
				timeout = "30s"
			}
			b := newBox(t, reg, ref, nil, fmt.Sprintf("install:\n  smoke_command: %s\n  validate_timeout: %s\n", c.smoke, timeout))
			envFile := filepath.Join(b.dir, "executor.env")
			writeFile(t, envFile, fmt.Sprintf("HBXTEST_WANT=true true 127.0.0.1 false true\nHBXTEST_LIVE=%s\nHBXTEST_PORT=%d\n", b.dataDir, b.port), 0o600)
			cfg := readFile(t, b.config)
			cfg = strings.Replace(cfg, "executor:\n", "executor:\n  env_file: "+envFile+"\n", 1)
			writeFile(t, b.config, cfg, 0o600)

			r := b.hbx("install")
			if c.want == "" {
				if r.code != 0 {
					t.Fatalf("hbx install = %d\n%s", r.code, r.stderr)
				}
				if b.current() == "" {
					t.Error("nothing activated")
				}
				return
			}
			if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "damaged") {
				t.Fatalf("hbx install = %d\n%s\nwant a failure saying %q, not damaged", r.code, r.stderr, c.want)
			}
			if cur := b.current(); cur != "" {
				t.Errorf("current -> %q after a failed smoke command, want nothing activated", cur)
			}
			if c.timeout != "" {
				// The server the smoke command started ran on a scratch
				// data directory, never the live one, and is gone with it.
				if _, err := os.Stat(filepath.Join(b.dataDir, "state.json")); !os.IsNotExist(err) {
					t.Errorf("the smoke command's server wrote the live data directory: %v", err)
				}
				if left, _ := filepath.Glob(filepath.Join(b.runtimeDir, "staging", ".smoke-*")); len(left) > 0 {
					t.Errorf("scratch directories left: %v", left)
				}
			}
			// Nothing the smoke command started is left running.
			if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)), time.Second); err == nil {
				conn.Close()
				t.Errorf("something still listens on the box's port %d after the smoke command", b.port)
			}
		})
	}
}
