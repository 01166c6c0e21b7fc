// SPDX-License-Identifier: Apache-2.0

package docker

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/hostbox"
)

// TestDockerHostBox drives boxes with `hbx box` only: two boxes side by
// side (each healthy, own key and port, isolated), ls, doctor green then
// red with a reason, stop/start, rotate-token, a failed new leaving
// nothing, and rm.
func TestDockerHostBox(t *testing.T) {
	s := requireDocker(t)
	h := s.hostBoxes(t)
	a, tookA := h.newBox("ha")
	b, tookB := h.newBox("hb")
	t.Logf("hbx box new -> ready: %v and %v", tookA.Round(100*time.Millisecond), tookB.Round(100*time.Millisecond))

	t.Run("two boxes: own key, port and files, plain compose works in the directory", func(t *testing.T) {
		if a.Port() == b.Port() || a.Port() == 0 {
			t.Errorf("ports %d and %d: want two", a.Port(), b.Port())
		}
		if boxKey(t, a) == boxKey(t, b) || len(boxKey(t, a)) != 64 {
			t.Errorf("keys: want two of 256 bits (64 hex)")
		}
		for _, bx := range []hostbox.Box{a, b} {
			for _, f := range []string{hostbox.KeyFile, hostbox.PassFile, hostbox.EnvFile} {
				if st, err := os.Stat(bx.Path(f)); err != nil || st.Mode().Perm() != 0o600 {
					t.Errorf("%s: %v %v, want mode 0600", bx.Path(f), st.Mode(), err)
				}
			}
			out, err := run(context.Background(), bx.Dir, nil, "compose", "ps", "-q")
			if err != nil || len(strings.Fields(out)) != 2 {
				t.Errorf("docker compose ps in %s: %q %v, want two containers", bx.Dir, out, err)
			}
			if code := postMCP(t, bx, boxKey(t, bx)); code != 200 {
				t.Errorf("%s with its key: %d, want 200", bx.Name, code)
			}
		}
		if code := postMCP(t, b, boxKey(t, a)); code != 401 {
			t.Errorf("box b with box a's key: %d, want 401", code)
		}
		id, err := run(context.Background(), b.Dir, nil, "compose", "ps", "-q", "executor")
		if err != nil {
			t.Fatal(err)
		}
		nets, err := run(context.Background(), "", nil, "inspect", "--format", `{{range $k, $v := .NetworkSettings.Networks}}{{$k}}={{$v.IPAddress}} {{end}}`, strings.TrimSpace(id))
		if err != nil {
			t.Fatal(err)
		}
		ip := ""
		for _, kv := range strings.Fields(nets) {
			if k, v, _ := strings.Cut(kv, "="); strings.HasSuffix(k, "_box") {
				ip = v
			}
		}
		if ip == "" {
			t.Fatalf("box b's executor has no address on its box network: %s", nets)
		}
		if out, err := run(context.Background(), a.Dir, nil, "compose", "exec", "-T", "agent", "agentprobe", "dial", ip+":4788"); err == nil {
			t.Errorf("box a's agent reached box b's executor at %s: %s", ip, out)
		}
	})

	t.Run("ls", func(t *testing.T) {
		out := h.mustHbx("ls")
		for _, bx := range []hostbox.Box{a, b} {
			if !lineHas(out, bx.Name, "running", "healthy", bx.URL()) {
				t.Errorf("hbx box ls:\n%s\nwant %s running healthy %s", out, bx.Name, bx.URL())
			}
		}
	})

	t.Run("doctor green, then red with a reason when the executor is stopped", func(t *testing.T) {
		out := h.mustHbx("doctor", a.Name)
		if strings.Contains(out, "FAIL") || !strings.Contains(out, "hbx health") {
			t.Errorf("doctor of a healthy box:\n%s", out)
		}
		if _, err := run(context.Background(), a.Dir, nil, "compose", "stop", "executor"); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := h.hbx("", "doctor", a.Name, "--boot-window", "2s")
		if code != 1 || !strings.Contains(out, "FAIL containers") || !strings.Contains(out, "executor is exited") ||
			!strings.Contains(out, "remedy: hbx box start "+a.Name) || !strings.Contains(errOut, "executor is exited") {
			t.Errorf("doctor with the executor stopped: exit %d\n%s%s\nwant 1, the reason and the remedy", code, out, errOut)
		}
		h.mustHbx("start", a.Name)
		h.mustHbx("doctor", a.Name)
	})

	t.Run("stop and start", func(t *testing.T) {
		start := time.Now()
		h.mustHbx("stop", b.Name)
		stopped := time.Since(start)
		if out := h.mustHbx("ls"); !lineHas(out, b.Name, "stopped") {
			t.Errorf("ls after stop:\n%s", out)
		}
		start = time.Now()
		h.mustHbx("start", b.Name)
		started := time.Since(start)
		t.Logf("hbx box stop: %v, start (to healthy): %v", stopped.Round(100*time.Millisecond), started.Round(100*time.Millisecond))
		// Generous bounds for a loaded machine; Docker's SIGKILL after
		// the grace period (45 s) is what they rule out.
		if stopped > 40*time.Second || started > 2*time.Minute {
			t.Errorf("stop took %v, start %v", stopped, started)
		}
		if code := postMCP(t, b, boxKey(t, b)); code != 200 {
			t.Errorf("after start, with the key: %d, want 200", code)
		}
	})

	t.Run("rotate-token", func(t *testing.T) {
		old := boxKey(t, a)
		out := h.mustHbx("rotate-token", a.Name)
		t.Logf("%s", strings.TrimSpace(out))
		if boxKey(t, a) == old {
			t.Fatal("mcp.key unchanged")
		}
		if code := postMCP(t, a, old); code != 401 {
			t.Errorf("old key from the host: %d, want 401", code)
		}
		if code := postMCP(t, a, boxKey(t, a)); code != 200 {
			t.Errorf("new key from the host: %d, want 200", code)
		}
		out, err := run(context.Background(), a.Dir, nil, "compose", "exec", "-T", "agent", "agentprobe", "mcp", "http://executor:4788/mcp", "/run/secrets/mcp_key")
		if err != nil || !strings.Contains(out, "status=200") {
			t.Errorf("the agent with its copy of the key: %q %v, want status=200", out, err)
		}
		if p := a.Port(); p != mustOpen(t, h.root, a.Name).Port() {
			t.Errorf("port changed across the recreate")
		}
	})

	t.Run("a failed new leaves nothing", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		busy := l.Addr().(*net.TCPAddr).Port
		for name, args := range map[string][]string{
			"bad name":         {"new", "Bad_Name", "--agent-image", s.agentImg},
			"duplicate":        {"new", a.Name, "--agent-image", s.agentImg},
			"port in use":      {"new", s.id + "hc", "--agent-image", s.agentImg, "--port", strconv.Itoa(busy)},
			"port of a box":    {"new", s.id + "hc", "--agent-image", s.agentImg, "--port", strconv.Itoa(b.Port())},
			"agent image gone": {"new", s.id + "hd", "--agent-image", s.id + "-no-such-agent:none", "--executor-image", s.execImg, "--wait", "1m"},
		} {
			out, errOut, code := h.hbx("", args...)
			want := 2
			if name == "agent image gone" {
				want = 1
			}
			if code != want || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
				t.Errorf("%s: exit %d, stderr %q (stdout %q): want %d and one line", name, code, errOut, out, want)
			}
			for _, n := range []string{"hc", "hd"} {
				if _, err := os.Lstat(filepath.Join(h.root, s.id+n)); err == nil {
					t.Errorf("%s: box directory %s left behind", name, s.id+n)
				}
				if left := projectLeft(t, s.id+n); left != "" {
					t.Errorf("%s: Docker objects left: %s", name, left)
				}
			}
		}
	})

	t.Run("rm asks for the name, then removes containers, volumes and directory", func(t *testing.T) {
		_, errOut, code := h.hbx("not-the-name\n", "rm", b.Name)
		if code != 2 || !strings.Contains(errOut, "nothing removed") {
			t.Errorf("rm with a wrong name typed: exit %d %q, want 2", code, errOut)
		}
		if _, err := os.Stat(b.Dir); err != nil || projectLeft(t, b.Name) == "" {
			t.Fatalf("rm with a wrong name removed something: %v", err)
		}
		out, errOut, code := h.hbx(b.Name+"\n", "rm", b.Name)
		if code != 0 {
			t.Fatalf("rm: exit %d %s %s", code, out, errOut)
		}
		if _, err := os.Lstat(b.Dir); err == nil {
			t.Errorf("rm left %s", b.Dir)
		}
		if left := projectLeft(t, b.Name); left != "" {
			t.Errorf("rm left Docker objects: %s", left)
		}
	})
}

// lineHas reports whether one line of out holds every word.
func lineHas(out string, words ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		all := true
		for _, w := range words {
			if !strings.Contains(l, w) {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

func mustOpen(t *testing.T, root, name string) hostbox.Box {
	t.Helper()
	b, err := hostbox.Open(root, name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
