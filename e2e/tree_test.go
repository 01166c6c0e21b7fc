package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testimage"
	"github.com/hermesbox/hbx/supervisor"
)

// Executor as upstream ships it today (issue 23): a process tree on
// loopback side ports (testimage.ShapeTree: a workerd child that ignores
// SIGTERM, a tool bridge), tools execute, skills, resume.

// treeInfo is what the tree-shaped test image says about its tree.
type treeInfo struct {
	PID  int `json:"pid"`
	Tree *struct {
		BridgePort  int `json:"bridgePort"`
		WorkerdPort int `json:"workerdPort"`
		WorkerdPID  int `json:"workerdPid"`
	} `json:"tree"`
}

// treeOf asks the payload on port for its tree; it fails the test when
// the payload is not a tree.
func treeOf(t *testing.T, port int) treeInfo {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/hbxtest/info", port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info treeInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || info.Tree == nil || info.Tree.WorkerdPID == 0 {
		t.Fatalf("GET /api/hbxtest/info: %+v, %v: want the payload's tree", info, err)
	}
	return info
}

// treeBox installs the tree-shaped image on a new box exposed as exposure
// ("loopback" or "network", with a fixed key then) and returns it with
// the key hbx health uses (health.token_file) and the supervisor's socket
// and record directory.
func treeBox(t *testing.T, exposure string) (b *box, key, socket, dir string) {
	t.Helper()
	reg, img, ref := pushedShape(t, testimage.ShapeTree)
	plat := platform(t)
	b = newBox(t, reg, ref, map[string]string{plat: img.Manifests[plat].String()}, "")
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install = %d\n%s", r.code, r.stderr)
	}
	socket, dir = supervisorConfig(t, b, "")
	keyFile := filepath.Join(b.dataDir, "api-key") // the test image mints it
	if exposure == "network" {
		key = strings.Repeat("7e", 32)
		keyFile = filepath.Join(b.dir, "box.key")
		writeFile(t, keyFile, key+"\n", 0o600)
		setExecutorKeys(t, b, fmt.Sprintf("  exposure: network\n  listen: 0.0.0.0\n  token_file: %s\n  token_env: EXECUTOR_AUTH_TOKEN\n", keyFile))
	}
	appendConfig(t, b, "health:\n  token_file: "+keyFile+"\n  mcp_tools: [execute, skills, resume]\n")
	return b, key, socket, dir
}

// callTool calls an MCP tool of the payload with key and returns its
// text result.
func callTool(t *testing.T, port int, key, name, args string) string {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, name, args)
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/mcp", port), strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/call %s = %s %s", name, resp.Status, b)
	}
	return string(b)
}

// TestTreeShapeE2E: the tree-shaped payload installs, becomes RUNNING
// under hbx supervise in both exposures and passes every check of hbx
// health, its side ports named; its tools run through its child; after
// kill -9 of Bun the SIGTERM-ignoring child is stopped at once and it is
// healthy again within seconds (the time is logged), hbx status never
// showing a made-up pid; a backup holds and restarts it; hbx stop leaves
// no process of the tree.
func TestTreeShapeE2E(t *testing.T) {
	requireE2E(t)
	for _, exposure := range []string{"loopback", "network"} {
		t.Run(exposure, func(t *testing.T) {
			b, key, socket, dir := treeBox(t, exposure)
			s := startSupervise(t, b, socket, dir)
			st := waitExecutor(t, s, 90*time.Second, "RUNNING", func(st supervisor.Status) bool {
				if st.State == supervisor.Fatal || st.State == supervisor.Backoff {
					t.Fatalf("executor = %s %q, want RUNNING", st.State, st.Detail)
				}
				return st.State == supervisor.Running
			})
			if key == "" {
				key = strings.TrimSpace(readFile(t, filepath.Join(b.dataDir, "api-key")))
			}
			info := treeOf(t, b.port)
			if info.PID != st.PID {
				t.Errorf("payload pid %d, supervisor says %d", info.PID, st.PID)
			}
			h := &healthBox{box: b, key: key}
			rep, r := h.health("")
			h.expect("a process tree", rep, r, nil, nil)
			if got := rep.check("listeners").Reason; !strings.Contains(got, "and 2 loopback side ports of its tree") ||
				!strings.Contains(got, fmt.Sprintf("127.0.0.1:%d pid %d", info.Tree.WorkerdPort, info.Tree.WorkerdPID)) {
				t.Errorf("listeners reason %q, want the 2 side ports, workerd's with its pid", got)
			} else {
				t.Logf("listeners: %s", got)
			}
			if got := callTool(t, b.port, key, "execute", `{"code":"1+1"}`); !strings.Contains(got, fmt.Sprintf(`\"workerd\":%d`, info.Tree.WorkerdPID)) || !strings.Contains(got, `\"bridged\":3`) {
				t.Errorf("execute = %s, want it run by workerd through the bridge", got)
			}
			for _, tool := range []string{"skills", "resume"} {
				if got := callTool(t, b.port, key, tool, `{"executionId":"x"}`); !strings.Contains(got, `"result"`) {
					t.Errorf("%s = %s, want a result", tool, got)
				}
			}

			took := killTreeLeader(t, s, b, info)
			t.Logf("kill -9 of the tree's Bun (%s) -> RUNNING and /api/health 200: %s", exposure, took.Round(time.Millisecond))

			// A backup holds it (stopped, tree gone) and restarts it.
			info = treeOf(t, b.port)
			appendConfig(t, b, fmt.Sprintf("backup:\n  dir: %s\n  health_wait: 60s\n", filepath.Join(b.dir, "backups")))
			if r := b.hbx("backup", "--no-encrypt", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"stopped"`) {
				t.Fatalf("hbx backup = %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			for _, pid := range []int{info.PID, info.Tree.WorkerdPID} {
				if !processGone(pid) {
					t.Errorf("pid %d of the tree before the backup still runs after it", pid)
				}
			}
			s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
			if rep, r := h.health(""); r.code != 0 {
				h.expect("after the backup", rep, r, nil, nil)
			}

			// A clean stop leaves nothing of the tree.
			info = treeOf(t, b.port)
			if r := b.hbx("stop", "executor"); r.code != 0 {
				t.Fatalf("hbx stop executor = %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			for _, pid := range []int{info.PID, info.Tree.WorkerdPID} {
				if !processGone(pid) {
					t.Errorf("pid %d of the tree still runs after hbx stop", pid)
				}
			}
			if m := groupMembers(info.PID); len(m) > 0 {
				t.Errorf("process group %d still has %v after hbx stop", info.PID, m)
			}
		})
	}
}

// killTreeLeader kills the payload's Bun with SIGKILL and returns how long
// it took until the executor was RUNNING again with /api/health 200. The
// old workerd must be gone before the new start; hbx status must never
// show RUNNING without a pid.
func killTreeLeader(t *testing.T, s *supervised, b *box, info treeInfo) time.Duration {
	t.Helper()
	c := s.client()
	killed := time.Now()
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var draining string
	for {
		sts, err := c.Status(t.Context())
		if err == nil {
			st := statusOf(sts, "executor")
			if st.State == supervisor.Running && st.PID == 0 || strings.Contains(st.Detail, "pid 0") || strings.Contains(st.Detail, "days") {
				t.Fatalf("executor status %s %q after the kill: a made-up pid or uptime", st.State, st.Detail)
			}
			if draining == "" && strings.Contains(st.Detail, "waiting for process group") {
				draining = st.State.String() + " " + st.Detail
				if r := b.hbx("status"); strings.Contains(r.stdout, "pid 0") || strings.Contains(r.stdout, "days") {
					t.Errorf("hbx status while the old group drains:\n%s", r.stdout)
				}
			}
			if st.State == supervisor.Running && st.PID != info.PID {
				break
			}
		}
		if time.Since(killed) > 60*time.Second {
			t.Fatal("executor not RUNNING again 60s after kill -9")
		}
		time.Sleep(5 * time.Millisecond)
	}
	healthyAt(t, b.port, 30*time.Second)
	took := time.Since(killed)
	if !processGone(info.Tree.WorkerdPID) {
		t.Errorf("the old workerd %d survived its Bun's kill -9", info.Tree.WorkerdPID)
	}
	t.Logf("while the old group drained: %s", draining)
	if took > 10*time.Second {
		t.Errorf("healthy again %s after kill -9, want well under stopwaitsecs", took)
	}
	return took
}

// TestCLIEditionShapeE2E: a payload shaped as the Executor CLI edition (no
// /api/health: 401 without its key, 404 with it) becomes RUNNING with
// health.token_file set and nothing else: readiness falls back to the
// authenticated MCP check; hbx health skips api-health saying so.
func TestCLIEditionShapeE2E(t *testing.T) {
	requireE2E(t)
	b := installedBox(t)
	socket, dir := supervisorConfig(t, b, "")
	keyFile := filepath.Join(b.dataDir, "api-key") // the test image writes it, mode 0600
	appendConfig(t, b, "health:\n  token_file: "+keyFile+"\n")
	env := filepath.Join(b.dir, "executor.env")
	writeFile(t, env, "HBXTEST_REQUIRE_KEY=1\nHBXTEST_NO_API_HEALTH=1\n", 0o600)
	s := startSupervise(t, b, socket, dir, "env", "HBX_EXECUTOR_ENV_FILE="+env)
	waitExecutor(t, s, 90*time.Second, "RUNNING", func(st supervisor.Status) bool {
		if st.State == supervisor.Fatal || st.State == supervisor.Backoff {
			t.Fatalf("executor = %s %q, want it to become RUNNING", st.State, st.Detail)
		}
		return st.State == supervisor.Running
	})
	key := strings.TrimSpace(readFile(t, keyFile))
	for _, c := range []struct {
		auth string
		want int
	}{{"", http.StatusUnauthorized}, {"Bearer " + key, http.StatusNotFound}} {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/api/health", b.port), nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("GET /api/health (key sent: %v) = %s, want %d: the variant is not the CLI edition's shape", c.auth != "", resp.Status, c.want)
		}
	}
	h := &healthBox{box: b, key: key}
	rep, r := h.health("")
	h.expect("the CLI edition's shape", rep, r, nil, nil, "api-health")
	if got := rep.check("api-health").Reason; !strings.Contains(got, "404") || !strings.Contains(got, "readiness falls back to mcp-tools") {
		t.Errorf("api-health reason %q, want the 404 and the fallback", got)
	}
	os.Remove(env)
}
