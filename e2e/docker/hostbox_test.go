// SPDX-License-Identifier: Apache-2.0

package docker

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/hostbox"
)

// hostBoxes runs `hbx box` with its root in a temporary directory, against
// the suite's engine, registry and images.
type hostBoxes struct {
	s    *suite
	t    *testing.T
	root string
	etc  string // the config directory every box's executor gets (pin, CA, key from the secret)
}

func (s *suite) hostBoxes(t *testing.T) *hostBoxes {
	t.Helper()
	h := &hostBoxes{s: s, t: t, root: filepath.Join(t.TempDir(), "boxes"), etc: filepath.Join(t.TempDir(), "etc")}
	cfg, err := os.ReadFile(filepath.Join(s.root, "deploy/hbx.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c := replaceOnce(t, string(cfg), "  install_on_start: true\n", fmt.Sprintf(
		"  install_on_start: true\n  image: %s\n  platform_digests:\n    linux/amd64: %s\n", s.refV1, s.pinV1))
	c = replaceOnce(t, c, `  token_file: ""`+"\n", "  token_file: /run/secrets/mcp_key\n")
	c = replaceOnce(t, c, `  token_env: ""`+"\n", "  token_env: EXECUTOR_AUTH_TOKEN\n")
	mustWrite(t, filepath.Join(h.etc, "hbx.yaml"), c, 0o644)
	mustWrite(t, filepath.Join(h.etc, "certs.d", registryHost, "ca.crt"), string(s.caPEM), 0o644)
	return h
}

// hbx runs `hbx box --dir ROOT ARGS` and returns its stdout, stderr and
// exit code.
func (h *hostBoxes) hbx(stdin string, args ...string) (string, string, int) {
	h.t.Helper()
	return h.hbxEnv(nil, stdin, args...)
}

// hbxEnv is hbx with env added to the test's environment.
func (h *hostBoxes) hbxEnv(env []string, stdin string, args ...string) (string, string, int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Getenv("HBXTEST_BIN"), append([]string{"box", "--dir", h.root}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		h.t.Fatalf("hbx box %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// mustHbxEnv is hbxEnv that fails the test unless it exits 0.
func (h *hostBoxes) mustHbxEnv(env []string, args ...string) string {
	h.t.Helper()
	out, errOut, code := h.hbxEnv(env, "", args...)
	if code != 0 {
		h.t.Fatalf("hbx box %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// mustHbx is hbx that fails the test unless it exits 0.
func (h *hostBoxes) mustHbx(args ...string) string {
	h.t.Helper()
	out, errOut, code := h.hbx("", args...)
	if code != 0 {
		h.t.Fatalf("hbx box %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// newBox runs `hbx box new` for name (s.id+name) on a registry network of
// its own, and registers the cleanup of whatever is left of the box.
func (h *hostBoxes) newBox(name string, extra ...string) (hostbox.Box, time.Duration) {
	h.t.Helper()
	full := h.s.id + name
	regNet := full + "-registry"
	ctx := context.Background()
	if _, err := run(ctx, "", nil, "network", "create", regNet); err != nil {
		h.t.Fatal(err)
	}
	if _, err := run(ctx, "", nil, "network", "connect", "--alias", "registry.hbx.test", regNet, h.s.regName); err != nil {
		h.t.Fatal(err)
	}
	override := filepath.Join(h.t.TempDir(), "override.yaml")
	mustWrite(h.t, override, fmt.Sprintf("services:\n  executor:\n    networks: [box, registry]\nnetworks:\n  registry:\n    name: %s\n    external: true\n", regNet), 0o644)
	h.t.Cleanup(func() {
		dir := filepath.Join(h.root, full)
		if _, err := os.Stat(filepath.Join(dir, hostbox.EnvFile)); err == nil {
			run(context.Background(), dir, nil, "compose", "down", "-v", "--timeout", "45")
		}
		run(context.Background(), "", nil, "network", "disconnect", "-f", regNet, h.s.regName)
		run(context.Background(), "", nil, "network", "rm", regNet)
	})
	start := time.Now()
	args := append([]string{"new", full, "--executor-image", h.s.execImg, "--agent-image", h.s.agentImg,
		"--config-dir", h.etc, "--override", override, "--set", "HEALTH_INTERVAL=2s", "--wait", "4m"}, extra...)
	out := h.mustHbx(args...)
	took := time.Since(start)
	if !strings.Contains(out, "box "+full+" ready in") {
		h.t.Errorf("hbx box new %s: %q, want a ready line", full, out)
	}
	b, err := hostbox.Open(h.root, full)
	if err != nil {
		h.t.Fatal(err)
	}
	return b, took
}

// projectLeft lists the containers, volumes and networks Docker still has
// for the Compose project of box name.
func projectLeft(t *testing.T, name string) string {
	t.Helper()
	filter := "label=com.docker.compose.project=hbx-" + name
	var left []string
	for _, args := range [][]string{{"ps", "-a", "-q", "--filter", filter}, {"volume", "ls", "-q", "--filter", filter}, {"network", "ls", "-q", "--filter", filter}} {
		out, err := run(context.Background(), "", nil, args...)
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.TrimSpace(out); s != "" {
			left = append(left, args[0]+": "+s)
		}
	}
	return strings.Join(left, "; ")
}

// postMCP POSTs an MCP initialize to the box's published port with key
// ("" for none) and returns the status.
func postMCP(t *testing.T, b hostbox.Box, key string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.URL()+"mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %smcp: %v", b.URL(), err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func boxKey(t *testing.T, b hostbox.Box) string {
	t.Helper()
	k, err := hostbox.ReadKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
