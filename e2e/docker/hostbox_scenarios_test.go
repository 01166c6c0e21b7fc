// SPDX-License-Identifier: Apache-2.0

package docker

import (
	"context"
	"net"
	"os"
	"os/exec"
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
		// An edit needs the running executor's own hbx to check the file:
		// refused before the editor runs (exit 2), nothing written.
		_, errOut, code := h.hbxEnv([]string{"VISUAL=", "EDITOR=false"}, "", "config", "--edit", b.Name)
		if code != 2 || !strings.Contains(errOut, "not running") {
			t.Errorf("config --edit of a stopped box: exit %d, stderr %q; want 2 saying the executor is not running", code, errOut)
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

	t.Run("config: printed, a refused edit changes nothing, a good one is switched in", func(t *testing.T) {
		before := h.mustHbx("config", b.Name)
		if !strings.Contains(before, "install_on_start: true") {
			t.Fatalf("hbx box config %s printed:\n%s", b.Name, before)
		}
		// A key hbx does not know: refused by the executor's own hbx, exit 2.
		_, errOut, code := h.hbxEnv([]string{"VISUAL=", "EDITOR=sed -i '1i nonsense_key: 1'"}, "", "config", "--edit", b.Name)
		if code != 2 || !strings.Contains(errOut, "nonsense_key") {
			t.Errorf("config --edit with an unknown key: exit %d, stderr %q; want 2 naming the key", code, errOut)
		}
		if now := h.mustHbx("config", b.Name); now != before {
			t.Errorf("a refused edit changed the file:\n%s", now)
		}
		// Unchanged: nothing written, no restart.
		if out := h.mustHbxEnv([]string{"VISUAL=", "EDITOR=true"}, "config", "--edit", b.Name); !strings.Contains(out, "unchanged") {
			t.Errorf("config --edit with no change: %q", out)
		}
		out := h.mustHbxEnv([]string{"VISUAL=", "EDITOR=sed -i '$a # edited by the test'"}, "config", "--edit", b.Name)
		t.Logf("%s", strings.TrimSpace(out))
		if now := h.mustHbx("config", b.Name); now != before+"# edited by the test\n" {
			t.Errorf("after the edit the file is:\n%s", now)
		}
		if kept, err := os.ReadFile(filepath.Join(b.Dir, hostbox.ConfigBeforeEdit)); err != nil || string(kept) != before {
			t.Errorf("%s after the edit: %q, %v; want the file as it was", hostbox.ConfigBeforeEdit, kept, err)
		}
		if code := postMCP(t, b, boxKey(t, b)); code != 200 {
			t.Errorf("after the edit's restart, with the key: %d, want 200", code)
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

	t.Run("save, two saves at once, rm, load quiesced with a fresh key", func(t *testing.T) {
		testSaveLoad(t, h, a)
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

	t.Run("an interrupted new leaves nothing", func(t *testing.T) {
		testInterruptedNew(t, h)
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

// testSaveLoad saves box a, removes it and loads it back.
func testSaveLoad(t *testing.T, h *hostBoxes, a hostbox.Box) {
	ctx := context.Background()
	if _, err := run(ctx, a.Dir, nil, "compose", "exec", "-T", "executor", "sh", "-c", "echo exec-a > /workspace/executor/data/marker"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(ctx, a.Dir, nil, "compose", "exec", "-T", "agent", "sh", "-c", "echo agent-a > /workspace/marker"); err != nil {
		t.Fatal(err)
	}
	keep := t.TempDir()
	pass := filepath.Join(keep, "backup.pass")
	passData, err := os.ReadFile(a.Path(hostbox.PassFile))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, pass, string(passData), 0o600)
	override := filepath.Join(keep, "override.yaml")
	ov, err := os.ReadFile(a.Path(hostbox.OverrideFile))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, override, string(ov), 0o644)

	// Two saves at once: the box's lock lets one run; the other is
	// refused (busy) and leaves no archive, or waits its turn.
	archives := []string{filepath.Join(keep, "one.box.tar.gz.gpg"), filepath.Join(keep, "two.box.tar.gz.gpg")}
	type result struct {
		out, errOut string
		code        int
	}
	results := make([]result, 2)
	done := make(chan int)
	start := time.Now()
	for i := range archives {
		go func(i int) {
			o, e, c := h.hbx("", "save", a.Name, "-o", archives[i])
			results[i] = result{o, e, c}
			done <- i
		}(i)
	}
	<-done
	<-done
	t.Logf("two saves at once: %v; %q %q", time.Since(start).Round(100*time.Millisecond), results[0].out+results[0].errOut, results[1].out+results[1].errOut)
	var archive string
	for i, r := range results {
		if r.code == 0 {
			archive = archives[i]
			if st, err := os.Stat(archives[i]); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("archive %s: %v, want mode 0600", archives[i], err)
			}
			if got := gpgDecryptTar(t, archives[i], pass, "agent/marker"); got != "agent-a\n" {
				t.Errorf("host gpg -d | tar -xzO agent/marker = %q", got)
			}
			continue
		}
		if !strings.Contains(r.errOut, "busy") {
			t.Errorf("save %d: exit %d %q, want 0 or a busy box", i, r.code, r.errOut)
		}
		if _, err := os.Lstat(archives[i]); err == nil {
			t.Errorf("a refused save left %s", archives[i])
		}
	}
	if archive == "" {
		t.Fatal("no save succeeded")
	}
	loadArgs := func(name string, extra ...string) []string {
		return append([]string{"load", name, archive, "--passphrase-file", pass, "--executor-image", h.s.execImg, "--agent-image", h.s.agentImg,
			"--config-dir", h.etc, "--override", override, "--set", "HEALTH_INTERVAL=2s", "--wait", "4m"}, extra...)
	}
	if _, errOut, code := h.hbx("", loadArgs(a.Name)...); code != 2 || !strings.Contains(errOut, "--force") {
		t.Errorf("load onto an existing box: exit %d %q, want 2 naming --force", code, errOut)
	}
	wrong := filepath.Join(keep, "wrong.pass")
	mustWrite(t, wrong, "not the passphrase\n", 0o600)
	args := loadArgs(h.s.id + "he")
	args[4] = wrong
	if _, errOut, code := h.hbx("", args...); code != 2 || !strings.Contains(errOut, "passphrase") {
		t.Errorf("load with a wrong passphrase: exit %d %q, want 2", code, errOut)
	}
	if _, err := os.Lstat(filepath.Join(h.root, h.s.id+"he")); err == nil || projectLeft(t, h.s.id+"he") != "" {
		t.Errorf("a refused load left something")
	}

	oldKey := boxKey(t, a)
	h.mustHbx("rm", a.Name, "--yes")
	start = time.Now()
	out := h.mustHbx(loadArgs(a.Name)...)
	t.Logf("hbx box load: %v: %s", time.Since(start).Round(100*time.Millisecond), strings.TrimSpace(out))
	b := mustOpen(t, h.root, a.Name)
	if got, err := run(ctx, b.Dir, nil, "compose", "exec", "-T", "executor", "cat", "/workspace/executor/data/marker"); err != nil || got != "exec-a\n" {
		t.Errorf("Executor's marker after load = %q %v, want exec-a", got, err)
	}
	if ls := h.mustHbx("ls"); !lineHas(ls, b.Name, "partial") {
		t.Errorf("ls after load:\n%s\nwant the box partial (agent not started)", ls)
	}
	if boxKey(t, b) == oldKey || postMCP(t, b, oldKey) != 401 || postMCP(t, b, boxKey(t, b)) != 200 {
		t.Errorf("after load: want a fresh key, the old one refused and the new one taken")
	}
	h.mustHbx("start", b.Name)
	if got := h.mustHbx("enter", b.Name, "--", "cat", "/workspace/marker"); got != "agent-a\n" {
		t.Errorf("hbx box enter ... cat the agent's marker after load = %q, want agent-a", got)
	}
	if got := h.mustHbx("logs", b.Name, "-n", "20", "executor"); !strings.Contains(got, "executor") {
		t.Errorf("hbx box logs %s -n 20 executor = %q, want the executor's lines", b.Name, got)
	}
	testLoadForce(t, h, b, filepath.Dir(archive), loadArgs(b.Name, "--force"))
}

// testLoadForce: load --force saves the box it replaces beside the
// archive (with its passphrase) before removing it, and does not replace
// a box it cannot save (a stopped one), leaving it as it was.
func testLoadForce(t *testing.T, h *hostBoxes, b hostbox.Box, dir string, args []string) {
	replaced := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, b.Name+"-replaced-*"))
		return m
	}
	key := boxKey(t, b)
	h.mustHbx("stop", b.Name)
	if _, errOut, code := h.hbx("", args...); code == 0 || !strings.Contains(errOut, "could not be saved first") {
		t.Errorf("load --force over a stopped box: exit %d %q, want a refusal saying it could not be saved first", code, errOut)
	}
	if _, err := hostbox.Open(h.root, b.Name); err != nil || boxKey(t, b) != key || len(replaced()) != 0 {
		t.Errorf("a refused load --force changed the box or left %v (open: %v)", replaced(), err)
	}
	h.mustHbx("start", b.Name)
	out := h.mustHbx(args...)
	got := replaced()
	if len(got) != 2 || !strings.Contains(out, "saved to "+got[0]) {
		t.Fatalf("load --force printed %q and left %v, want the replaced box's archive and its .pass", out, got)
	}
	for _, f := range got {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", f, st.Mode(), err)
		}
	}
	nb := mustOpen(t, h.root, b.Name)
	if boxKey(t, nb) == key || postMCP(t, nb, boxKey(t, nb)) != 200 {
		t.Errorf("after load --force: want a fresh key that the executor takes")
	}
}

// testInterruptedNew interrupts `hbx box new` (SIGINT, as Ctrl-C) while
// `up` waits for an executor that cannot become healthy (the default pin,
// unreachable here), and wants nothing of the box left.
func testInterruptedNew(t *testing.T, h *hostBoxes) {
	name := h.s.id + "hf"
	cmd := exec.Command(os.Getenv("HBXTEST_BIN"), "box", "--dir", h.root, "new", name, "--agent-image", h.s.agentImg, "--executor-image", h.s.execImg, "--wait", "3m")
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	for projectLeft(t, name) == "" || !strings.Contains(projectLeft(t, name), "ps:") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("hbx box new made no containers within 2m: %s", errb.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(time.Second) // inside up now
	start := time.Now()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("interrupted new exited 0")
		}
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("interrupted new did not exit within 3m: %s", errb.String())
	}
	t.Logf("interrupted new exited %v after SIGINT: %s", time.Since(start).Round(100*time.Millisecond), strings.TrimSpace(errb.String()))
	if _, err := os.Lstat(filepath.Join(h.root, name)); err == nil {
		t.Errorf("an interrupted new left its directory")
	}
	if left := projectLeft(t, name); left != "" {
		t.Errorf("an interrupted new left Docker objects: %s", left)
	}
}
