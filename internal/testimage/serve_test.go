// SPDX-License-Identifier: Apache-2.0

package testimage_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/internal/testimage"
)

// payload is the test image applied to a directory, ready to run natively.
type payload struct {
	root string
	env  []string // the image config's Env
}

// TestServe runs the image's own Bun on serve.ts, as hbx would, and checks
// the stand-in Executor's surface and its persistence across restarts.
func TestServe(t *testing.T) {
	platform := hostPlatform(t)
	tarballs := realBunTarballs(t)
	dir := t.TempDir()
	start := time.Now()
	if _, err := testimage.BuildLayout(dir, testimage.Options{BunTarballs: tarballs, Version: "1.2.3", Platforms: []string{platform}}); err != nil {
		t.Fatalf("BuildLayout() = %v", err)
	}
	_, _, images := readLayout(t, dir)
	p := payload{root: t.TempDir(), env: images[0].config.Config.Env}
	applyLayers(t, dir, images[0], p.root)
	t.Logf("built and applied %s in %v", platform, time.Since(start).Round(time.Millisecond))

	data := filepath.Join(t.TempDir(), "data")
	var key string
	t.Run("first start", func(t *testing.T) {
		s := p.start(t, data, nil)
		defer s.stop(t)

		body, resp := s.get(t, "/api/health")
		if resp.StatusCode != http.StatusOK || !jsonEqual(body, `{"status":"ok"}`) {
			t.Errorf("GET /api/health = %s %s, want 200 {\"status\":\"ok\"}", resp.Status, body)
		}
		body, resp = s.get(t, "/")
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
			!bytes.Contains(body, []byte("<title>Executor setup</title>")) || !bytes.Contains(body, []byte("1.2.3")) {
			t.Errorf("GET / = %s %q %q, want 200 text/html setup page", resp.Status, resp.Header.Get("Content-Type"), body)
		}
		if m := regexp.MustCompile(`(?i)<script|(src|href)\s*=\s*"(https?:)?//`).Find(body); m != nil {
			t.Errorf("GET / has a script or an external resource (%q): %s", m, body)
		}
		body, resp = s.get(t, "/.well-known/oauth-protected-resource/mcp")
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"resource":"http://localhost:`+s.port+`/mcp"`)) {
			t.Errorf("GET protected resource metadata = %s %s", resp.Status, body)
		}
		body, resp = s.get(t, "/nope")
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /nope = %s %s, want 404", resp.Status, body)
		}

		wantChallenge := `Bearer realm="executor", resource_metadata="http://localhost:` + s.port + `/.well-known/oauth-protected-resource/mcp"`
		for _, auth := range []string{"", "Bearer wrong", "Basic abc"} {
			_, resp := s.mcp(t, auth, "", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != wantChallenge {
				t.Errorf("POST /mcp with %q = %s, WWW-Authenticate %q; want 401, %q", auth, resp.Status, resp.Header.Get("WWW-Authenticate"), wantChallenge)
			}
		}

		key = readKey(t, data)
		s.checkMCP(t, "Bearer "+key)

		for _, c := range []struct {
			path string
			mode os.FileMode
		}{{data, 0o700 | os.ModeDir}, {filepath.Join(data, "api-key"), 0o600}, {filepath.Join(data, "state.json"), 0o600}} {
			if fi, err := os.Stat(c.path); err != nil || fi.Mode() != c.mode {
				t.Errorf("%s: mode %v, %v; want %v", c.path, fi.Mode(), err, c.mode)
			}
		}
		checkState(t, data, `{"format":1,"version":"1.2.3","starts":1}`)
	})

	t.Run("restart", func(t *testing.T) {
		s := p.start(t, data, []string{
			"EXECUTOR_WEB_BASE_URL=https://executor.example/",
			"HBXTEST_FAIL_HEALTH=1",
			"HBXTEST_FORCE_HOST=0.0.0.0",
		})
		defer s.stop(t)
		checkState(t, data, `{"format":1,"version":"1.2.3","starts":2}`)
		if got := readKey(t, data); got != key {
			t.Errorf("api-key changed across restarts: %q, then %q", key, got)
		}
		if _, resp := s.get(t, "/api/health"); resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("GET /api/health with HBXTEST_FAIL_HEALTH=1 = %s, want 503", resp.Status)
		}
		want := `Bearer realm="executor", resource_metadata="https://executor.example/.well-known/oauth-protected-resource/mcp"`
		if _, resp := s.mcp(t, "", "", `{}`); resp.Header.Get("WWW-Authenticate") != want {
			t.Errorf("WWW-Authenticate = %q, want %q", resp.Header.Get("WWW-Authenticate"), want)
		}
		if !strings.Contains(s.output.String(), "listening on http://0.0.0.0:") {
			t.Errorf("HBXTEST_FORCE_HOST=0.0.0.0 ignored; output:\n%s", s.output.String())
		}
		var info struct {
			Cwd string            `json:"cwd"`
			Bun string            `json:"bun"`
			Env map[string]string `json:"env"`
		}
		body, _ := s.get(t, "/api/hbxtest/info")
		if err := json.Unmarshal(body, &info); err != nil {
			t.Fatalf("GET /api/hbxtest/info: %v: %s", err, body)
		}
		if info.Cwd != filepath.Join(p.root, testimage.AppDir) || info.Bun != testimage.BunVersion || info.Env["NODE_ENV"] != "production" {
			t.Errorf("GET /api/hbxtest/info = %s", body)
		}
	})

	t.Run("key required, skills, degraded", func(t *testing.T) {
		flag := filepath.Join(t.TempDir(), "degraded")
		s := p.start(t, data, []string{"HBXTEST_REQUIRE_KEY=1", "HBXTEST_SKILLS=1", "HBXTEST_DEGRADED_IF=" + flag})
		defer s.stop(t)
		for _, path := range []string{"/api/health", "/", "/.well-known/oauth-protected-resource/mcp", "/nope"} {
			if _, resp := s.get(t, path); resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") {
				t.Errorf("GET %s without the key = %s, WWW-Authenticate %q; want 401 with a Bearer challenge", path, resp.Status, resp.Header.Get("WWW-Authenticate"))
			}
		}
		health := func() ([]byte, *http.Response) {
			req, _ := http.NewRequest(http.MethodGet, s.base+"/api/health", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			return do(t, req)
		}
		if body, resp := health(); resp.StatusCode != http.StatusOK || !jsonEqual(body, `{"status":"ok"}`) {
			t.Errorf("GET /api/health with the key = %s %s, want 200 ok", resp.Status, body)
		}
		if err := os.WriteFile(flag, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if body, resp := health(); resp.StatusCode != http.StatusOK || !jsonEqual(body, `{"status":"degraded"}`) {
			t.Errorf("GET /api/health with %s present = %s %s, want 200 degraded", flag, resp.Status, body)
		}
		r, resp := s.mcp(t, "Bearer "+key, "", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		if resp.StatusCode != http.StatusOK || !bytes.Contains(r, []byte(`"name":"skills"`)) || !bytes.Contains(r, []byte(`"name":"resume"`)) {
			t.Errorf("tools/list with HBXTEST_SKILLS=1 = %s %s, want execute, resume and skills", resp.Status, r)
		}
	})

	t.Run("fixed key", func(t *testing.T) {
		fixed := strings.Repeat("ab", 32)
		s := p.start(t, data, []string{"EXECUTOR_AUTH_TOKEN=" + fixed})
		defer s.stop(t)
		if _, resp := s.mcp(t, "Bearer "+key, "", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("tools/list with the minted key while EXECUTOR_AUTH_TOKEN is set = %s, want 401", resp.Status)
		}
		s.checkMCP(t, "Bearer "+fixed)
		if got := readKey(t, data); got != key {
			t.Errorf("api-key after a start with EXECUTOR_AUTH_TOKEN = %q, want the minted key kept", got)
		}
	})

	t.Run("newer data format", func(t *testing.T) {
		newer := filepath.Join(t.TempDir(), "data")
		if err := os.MkdirAll(newer, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(newer, "state.json"), []byte(`{"format":2,"version":"2.0.0","starts":7}`), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := p.command(t, newer, "0", nil).CombinedOutput()
		if code := exitCode(err); code != 1 || !strings.Contains(string(out), "data format 2 is newer") {
			t.Errorf("serve.ts on format 2 data: exit %d (%v), output %q; want 1 and a format error", code, err, out)
		}
	})

	t.Run("exit at start", func(t *testing.T) {
		out, err := p.command(t, filepath.Join(t.TempDir(), "data"), "0", []string{"HBXTEST_EXIT_AT_START=3"}).CombinedOutput()
		if code := exitCode(err); code != 3 {
			t.Errorf("serve.ts with HBXTEST_EXIT_AT_START=3: exit %d (%v), output %q", code, err, out)
		}
	})
}

// server is a running serve.ts.
type server struct {
	cmd    *exec.Cmd
	port   string
	base   string // http://127.0.0.1:port
	output *bytes.Buffer
	exited chan error
}

// command is how hbx runs the payload: the image's bun, found on the
// image's PATH under root, in the image's working directory, with the
// image's environment, the data directory mapped and the host on loopback.
func (p payload) command(t *testing.T, data, port string, extra []string) *exec.Cmd {
	t.Helper()
	var path string
	env := []string{"HOME=" + t.TempDir()}
	for _, kv := range p.env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH":
			var dirs []string
			for _, d := range filepath.SplitList(v) {
				dirs = append(dirs, filepath.Join(p.root, d))
			}
			path = strings.Join(dirs, ":")
			kv = "PATH=" + path
		case "EXECUTOR_HOST":
			kv = "EXECUTOR_HOST=127.0.0.1"
		case "EXECUTOR_DATA_DIR":
			kv = "EXECUTOR_DATA_DIR=" + data
		case "PORT":
			kv = "PORT=" + port
		}
		env = append(env, kv)
	}
	env = append(env, "EXECUTOR_ALLOW_LOCAL_NETWORK=false", "BUN_FEATURE_FLAG_DISABLE_IPV6=1")
	env = append(env, extra...)
	bun := filepath.Join(p.root, "usr/local/bin/bun")
	cmd := exec.Command(bun, "run", "src/serve.ts")
	cmd.Dir = filepath.Join(p.root, testimage.AppDir)
	cmd.Env = env
	return cmd
}

// start runs serve.ts on a free port and waits until GET / answers.
func (p payload) start(t *testing.T, data string, extra []string) *server {
	t.Helper()
	port := strconv.Itoa(freePort(t))
	s := &server{port: port, base: "http://127.0.0.1:" + port, output: &bytes.Buffer{}, exited: make(chan error, 1)}
	s.cmd = p.command(t, data, port, extra)
	s.cmd.Stdout, s.cmd.Stderr = s.output, s.output
	begin := time.Now()
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start bun: %v", err)
	}
	go func() { s.exited <- s.cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(s.base + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case err := <-s.exited:
			t.Fatalf("serve.ts exited before listening (%v):\n%s", err, s.output)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.cmd.Process.Kill()
			t.Fatalf("serve.ts not listening after 30s:\n%s", s.output)
		}
	}
	t.Logf("serve.ts answered after %v: %s", time.Since(begin).Round(time.Millisecond), strings.TrimSpace(s.output.String()))
	return s
}

// stop sends SIGTERM and expects a prompt exit with status 0.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("SIGTERM: %v", err)
	}
	select {
	case err := <-s.exited:
		if err != nil {
			t.Errorf("serve.ts after SIGTERM: %v, want exit 0; output:\n%s", err, s.output)
		}
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
		t.Errorf("serve.ts still running 5s after SIGTERM")
	}
}

func (s *server) get(t *testing.T, path string) ([]byte, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

// mcp posts one JSON-RPC body to /mcp.
func (s *server) mcp(t *testing.T, auth, session, body string) ([]byte, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.base+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	return do(t, req)
}

// checkMCP walks an authenticated MCP session: initialize, initialized,
// tools/list, tools/call.
func (s *server) checkMCP(t *testing.T, auth string) {
	t.Helper()
	type rpcResponse struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      int             `json:"id"`
		Result  json.RawMessage `json:"result"`
		Error   *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	call := func(session, body string) (rpcResponse, *http.Response) {
		t.Helper()
		raw, resp := s.mcp(t, auth, session, body)
		var r rpcResponse
		if resp.StatusCode == http.StatusOK {
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("POST /mcp %s: Content-Type %q, want application/json", body, ct)
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatalf("POST /mcp %s: %v: %s", body, err, raw)
			}
		}
		return r, resp
	}

	for _, v := range []struct{ asked, want string }{
		{"2025-06-18", "2025-06-18"},
		{"2025-03-26", "2025-03-26"},
		{"2024-11-05", "2024-11-05"},
		{"1999-01-01", "2025-11-25"},
	} {
		r, resp := call("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+v.asked+`","capabilities":{},"clientInfo":{"name":"hbx-test","version":"0"}}}`)
		var init struct {
			ProtocolVersion string `json:"protocolVersion"`
			ServerInfo      struct{ Name string }
		}
		json.Unmarshal(r.Result, &init)
		if resp.StatusCode != http.StatusOK || init.ProtocolVersion != v.want || init.ServerInfo.Name != "executor" || resp.Header.Get("Mcp-Session-Id") == "" {
			t.Errorf("initialize(%s) = %s %s, session %q; want 200, protocol %s, a session", v.asked, resp.Status, r.Result, resp.Header.Get("Mcp-Session-Id"), v.want)
		}
	}
	_, resp := call("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"hbx-test","version":"0"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")

	raw, resp := s.mcp(t, auth, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if resp.StatusCode != http.StatusAccepted || len(raw) != 0 {
		t.Errorf("notifications/initialized = %s %q, want 202 and no body", resp.Status, raw)
	}

	r, resp := call(session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	var list struct {
		Tools []struct {
			Name        string         `json:"name"`
			InputSchema map[string]any `json:"inputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.Result, &list); err != nil || resp.StatusCode != http.StatusOK || r.ID != 2 {
		t.Fatalf("tools/list = %s id %d %s (%v)", resp.Status, r.ID, r.Result, err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.InputSchema["type"] != "object" {
			t.Errorf("tool %s inputSchema %v, want type object", tool.Name, tool.InputSchema)
		}
	}
	if diff := cmp.Diff(names, []string{"execute", "resume"}); diff != "" {
		t.Errorf("tools/list names (-got +want):\n%s", diff)
	}

	r, resp = call(session, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"execute","arguments":{"code":"return 1"}}}`)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(r.Result, []byte(`"isError":false`)) {
		t.Errorf("tools/call execute = %s %s", resp.Status, r.Result)
	}
	r, _ = call(session, `{"jsonrpc":"2.0","id":4,"method":"nope"}`)
	if r.Error == nil || r.Error.Code != -32601 {
		t.Errorf("unknown method: error %+v, want -32601", r.Error)
	}
	if _, resp := call("no-such-session", `{"jsonrpc":"2.0","id":5,"method":"tools/list"}`); resp.StatusCode != http.StatusNotFound {
		t.Errorf("tools/list with an unknown session = %s, want 404", resp.Status)
	}
	if _, resp := call("", `{"jsonrpc":"2.0","id":6,"method":"tools/list"}`); resp.StatusCode != http.StatusOK {
		t.Errorf("tools/list without a session = %s, want 200", resp.Status)
	}
	req, _ := http.NewRequest(http.MethodGet, s.base+"/mcp", nil)
	req.Header.Set("Authorization", auth)
	if _, resp := do(t, req); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /mcp = %s, want 405", resp.Status)
	}
}

func readKey(t *testing.T, data string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "api-key"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(key) {
		t.Errorf("api-key = %q, want 64 hex digits", key)
	}
	return key
}

func checkState(t *testing.T, data, want string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !jsonEqual(b, want) {
		t.Errorf("state.json = %s, want %s", b, want)
	}
	leftovers, _ := filepath.Glob(filepath.Join(data, "*.tmp-*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left in the data directory: %v", leftovers)
	}
}

func jsonEqual(a []byte, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && cmp.Equal(x, y)
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
