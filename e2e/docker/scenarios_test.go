// SPDX-License-Identifier: Apache-2.0

package docker

import (
	"context"
	"encoding/json"
	"fmt"
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
)

// TestDockerBox walks one box through the scenarios 1 to 5, in
// order, on the real engine; box B (scenario 2) runs beside it.
func TestDockerBox(t *testing.T) {
	s := requireDocker(t)
	t.Logf("MEASURE executor image %s: %d bytes (%.1f MB) on base %s", s.execImg, s.imgSize, float64(s.imgSize)/1e6, s.base)
	a := s.newBox(t, "a", boxOptions{})

	// 1. up --wait: executor healthy first, then the agent.
	took := a.upWait()
	t.Logf("MEASURE first start (pull + install + healthy, up --wait): %v", took.Round(time.Millisecond))
	if st := a.inspect("executor", "{{.State.Health.Status}}"); st != "healthy" {
		t.Fatalf("executor health after up --wait = %q, want healthy", st)
	}
	firstPass := time.Time{}
	for _, l := range a.health().Log {
		if l.ExitCode == 0 {
			firstPass = l.End
			break
		}
	}
	agentStart, err := time.Parse(time.RFC3339Nano, a.inspect("agent", "{{.State.StartedAt}}"))
	if err != nil {
		t.Fatal(err)
	}
	if firstPass.IsZero() || agentStart.Before(firstPass) {
		t.Errorf("agent started at %v, executor's first passing healthcheck ended at %v: want the agent after", agentStart, firstPass)
	}
	t.Run("agent reaches /mcp by the service name", func(t *testing.T) {
		a := a.with(t)
		if out := a.exec("agent", "agentprobe", "mcp", "http://executor:4788/mcp"); !strings.Contains(out, "status=401") {
			t.Errorf("agent POST /mcp without key: %q, want status=401", out)
		}
		out := a.exec("agent", "agentprobe", "mcp", "http://executor:4788/mcp", "/run/secrets/mcp_key")
		if !strings.Contains(out, "status=200") || !strings.Contains(out, "tools=execute,resume\n") {
			t.Errorf("agent MCP with the key: %q, want status=200 and tools=execute,resume", out)
		}
	})
	t.Run("host reaches the published port, the agent publishes nothing", func(t *testing.T) {
		a := a.with(t)
		if code, body := a.hostGet("/api/health"); code != 200 {
			t.Errorf("host GET /api/health on 127.0.0.1:%d = %d %q, want 200", a.hostPort, code, body)
		}
		// Executor's base URL names the published port (compose.yaml hands
		// HOST_PORT to executor.host_port), not the container's 4788.
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/mcp", a.hostPort), "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatalf("host POST /mcp: %v", err)
		}
		resp.Body.Close()
		if want := fmt.Sprintf(`resource_metadata="http://localhost:%d/`, a.hostPort); resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), want) {
			t.Errorf("host POST /mcp without key = %d, WWW-Authenticate %q: want 401 naming %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), want)
		}
		if got := a.inspect("executor", `{{range $p, $b := .NetworkSettings.Ports}}{{$p}}={{range $b}}{{.HostIp}}:{{.HostPort}}{{end}} {{end}}`); got != "4788/tcp=127.0.0.1:"+itoa(a.hostPort) {
			t.Errorf("executor ports = %q, want only 4788/tcp on 127.0.0.1:%d", got, a.hostPort)
		}
		if got := a.inspect("agent", `{{len .NetworkSettings.Ports}} {{len .HostConfig.PortBindings}}`); got != "0 0" {
			t.Errorf("agent ports and bindings = %q, want none", got)
		}
	})
	t.Run("Executor runs as the user executor, hbx as root", func(t *testing.T) {
		a := a.with(t)
		pid := executorPID(t, a)
		if got := strings.TrimSpace(a.exec("executor", "stat", "-c", "%U", "/proc/1", "/proc/"+pid)); got != "root\nexecutor" {
			t.Errorf("owners of pid 1 (hbx) and %s (Executor) = %q, want root and executor", pid, got)
		}
	})
	a.noZombies("after up")
	t.Run("hbx as PID 1 reaps orphans", func(t *testing.T) {
		a := a.with(t)
		// The sleep is orphaned when its shell exits: the container's
		// PID 1, hbx, inherits it and must reap it when it exits.
		a.exec("executor", "sh", "-c", "sleep 1 & exit 0")
		deadline := time.Now().Add(30 * time.Second)
		for {
			out := a.exec("executor", "sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null")
			if !strings.Contains(out, "(sleep)") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the orphaned sleep is still in the process table after 30s (not reaped):\n%s", out)
			}
			time.Sleep(500 * time.Millisecond)
		}
		a.noZombies("after an orphan exited")
	})

	// 2. A second box: its executor is neither resolvable nor reachable
	// from the first box's agent.
	t.Run("two boxes side by side", func(t *testing.T) {
		a := a.with(t)
		bb := s.newBox(t, "b", boxOptions{})
		bb.upWait()
		other := bb.container("executor")
		name := strings.TrimPrefix(bb.inspect("executor", "{{.Name}}"), "/")
		var ip string
		for net, addr := range networks(t, bb) {
			if strings.HasSuffix(net, "_box") {
				ip = addr
			}
		}
		if ip == "" {
			t.Fatalf("box b's executor %s has no address on its box network", other)
		}
		if out, err := a.execErr("agent", "agentprobe", "resolve", name); err == nil {
			t.Errorf("box a's agent resolved box b's executor %s: %s", name, out)
		}
		if out, err := a.execErr("agent", "agentprobe", "dial", ip+":4788"); err == nil {
			t.Errorf("box a's agent reached box b's executor at %s:4788: %s", ip, out)
		}
		if out := a.exec("agent", "agentprobe", "resolve", "executor"); strings.Contains(out, ip) {
			t.Errorf("box a's agent resolves executor to %s, box b's address", out)
		}
		if out := bb.exec("agent", "agentprobe", "mcp", "http://executor:4788/mcp", "/run/secrets/mcp_key"); !strings.Contains(out, "tools=execute,resume\n") {
			t.Errorf("box b's agent with its key: %q", out)
		}
	})

	// 3. kill -9 of Bun: hbx restarts it, the container is not restarted.
	t.Run("kill -9 of Bun inside the container", func(t *testing.T) {
		a := a.with(t)
		started := a.inspect("executor", "{{.State.StartedAt}}")
		pid := executorPID(t, a)
		if comm := strings.TrimSpace(a.exec("executor", "cat", "/proc/"+pid+"/comm")); comm != "bun" {
			t.Fatalf("executor's process %s is %q, want bun", pid, comm)
		}
		a.exec("executor", "sh", "-c", "kill -9 "+pid)
		// Bun is dead once kill returns: a healthcheck that starts after
		// now ran against the new one.
		killed := time.Now()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			np := runningPID(t, a)
			if np != "" && np != pid {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("executor not RUNNING with a new pid within 2m of kill -9 of %s (now %q)", pid, np)
			}
			time.Sleep(200 * time.Millisecond)
		}
		a.waitHealthySince(killed, 2*time.Minute)
		if got := a.inspect("executor", "{{.RestartCount}} {{.State.StartedAt}}"); got != "0 "+started {
			t.Errorf("executor container restart count and start = %q, want 0 %s (never restarted)", got, started)
		}
		a.noZombies("after kill -9")
	})
	t.Run("warm restart with the registry stopped", func(t *testing.T) {
		a := a.with(t)
		ctx := context.Background()
		if _, err := run(ctx, "", nil, "stop", s.regName); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if _, err := run(ctx, "", nil, "start", s.regName); err != nil {
				t.Fatal(err)
			}
		}()
		before := time.Now()
		a.compose("restart", "executor")
		started, err := time.Parse(time.RFC3339Nano, a.inspect("executor", "{{.State.StartedAt}}"))
		if err != nil {
			t.Fatal(err)
		}
		if !started.After(before) {
			t.Fatalf("executor container started at %v, before the restart at %v", started, before)
		}
		healthy := a.waitHealthySince(started, 3*time.Minute)
		t.Logf("MEASURE warm restart (compose restart executor to a passing healthcheck, registry stopped): %v", healthy.Sub(before).Round(time.Millisecond))
		a.noZombies("after restart")
	})

	// 4. compose stop: SIGTERM through hbx, clean exit within the grace
	// period.
	t.Run("compose stop", func(t *testing.T) {
		a := a.with(t)
		start := time.Now()
		a.compose("stop")
		took := time.Since(start)
		if got := a.inspect("executor", "{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}"); got != "exited 0 false" {
			t.Errorf("executor after compose stop: %q, want exited 0 false (hbx exited by itself, no SIGKILL)", got)
		}
		logs := a.logs()
		// The last run's stop: Docker's SIGTERM reached hbx, hbx sent
		// SIGTERM to Executor, Executor exited without SIGKILL. hbx sees
		// the signal twice (its command's context and the supervisor's
		// handler), so "stopping program" may come before the signal
		// line: search the whole last run, from its "supervisor started".
		i := strings.LastIndex(logs, `msg="supervisor started"`)
		if i < 0 {
			t.Fatalf("hbx did not log its start:\n%s", tail(logs))
		}
		last := logs[i:]
		if !strings.Contains(last, `msg="signal: stopping every program, then exiting" signal=SIGTERM`) {
			t.Fatalf("hbx did not log Docker's SIGTERM:\n%s", last)
		}
		if !regexp.MustCompile(`msg=stopping program=executor pid=\d+ signal=SIGTERM`).MatchString(last) {
			t.Errorf("hbx did not stop executor with SIGTERM:\n%s", last)
		}
		if m := regexp.MustCompile(`msg=exited program=executor pid=\d+ status=(.*)`).FindStringSubmatch(last); m == nil || strings.Contains(m[1], "KILL") {
			t.Errorf("executor's exit after SIGTERM: %q, want one without SIGKILL:\n%s", m, last)
		} else {
			t.Logf("executor's exit on compose stop: status=%s", m[1])
		}
		if strings.Contains(logs, "killing the process group") {
			t.Errorf("hbx had to SIGKILL a program on compose stop:\n%s", tail(logs))
		}
		if !strings.Contains(logs, "all programs stopped") {
			t.Errorf("hbx did not log that every program stopped:\n%s", tail(logs))
		}
		if took > 40*time.Second {
			t.Errorf("compose stop took %v, want well within the 45s grace period", took)
		}
		t.Logf("compose stop took %v", took.Round(time.Millisecond))
		a.upWait()
	})

	// 5. Backup and restore in the container, data across down/up, a
	// wiped runtime volume, upgrade and rollback.
	t.Run("backup, restore, down/up, wiped runtime, upgrade, rollback", func(t *testing.T) {
		a := a.with(t)
		a.exec("executor", "sh", "-c", "echo one > /workspace/executor/data/marker")
		a.exec("executor", "hbx", "backup")
		archive := strings.TrimSpace(a.exec("executor", "sh", "-c", "ls /backup/executor/executor-*.tar.gz.gpg | tail -n1"))
		host := filepath.Join(a.dir, "out")
		if err := os.MkdirAll(host, 0o700); err != nil {
			t.Fatal(err)
		}
		a.compose("cp", "executor:"+archive, host+"/")
		if got := gpgDecryptTar(t, filepath.Join(host, filepath.Base(archive)), filepath.Join(a.dir, "backup.pass"), "./marker"); got != "one\n" {
			t.Errorf("host gpg -d | tar -xzO ./marker = %q, want one", got)
		}

		a.exec("executor", "sh", "-c", "echo two > /workspace/executor/data/marker")
		a.exec("executor", "hbx", "restore", archive)
		if got := a.exec("executor", "cat", "/workspace/executor/data/marker"); got != "one\n" {
			t.Errorf("marker after restore = %q, want one", got)
		}

		a.compose("down", "--timeout", "45")
		a.upWait()
		if got := a.exec("executor", "cat", "/workspace/executor/data/marker"); got != "one\n" {
			t.Errorf("marker after down/up = %q, want one", got)
		}

		a.compose("down", "--timeout", "45")
		if _, err := run(context.Background(), "", nil, "volume", "rm", a.project+"_runtime"); err != nil {
			t.Fatal(err)
		}
		took := a.upWait()
		t.Logf("up after wiping the runtime volume (re-pull): %v", took.Round(time.Millisecond))
		if logs := a.logs(); !strings.Contains(logs, "fetched=true") || !strings.Contains(logs, `reason="no active release"`) {
			t.Errorf("the new container did not pull into the wiped runtime volume:\n%s", tail(logs))
		}
		if got := a.exec("executor", "cat", "/workspace/executor/data/marker"); got != "one\n" {
			t.Errorf("marker after a wiped runtime = %q, want one", got)
		}

		a.exec("executor", "hbx", "upgrade", "--image", s.refV2, "--platform-digest", s.pinV2)
		checkRelease(t, a, "docker-v2", s.refV2)
		a.compose("down", "--timeout", "45")
		a.upWait()
		checkRelease(t, a, "docker-v2", s.refV2)
		a.exec("executor", "hbx", "rollback")
		checkRelease(t, a, "docker-v1", s.refV1)
		if got := a.exec("executor", "cat", "/workspace/executor/data/marker"); got != "one\n" {
			t.Errorf("marker after upgrade and rollback = %q, want one", got)
		}
		a.noZombies("after rollback")
	})
}

// TestDockerBadConfig: on a bad config file hbx (the image's supervise
// --hold-on-error) prints its one-line error and stays up: the container
// keeps running, is never restarted (restart: unless-stopped would loop
// on an exit), turns unhealthy, and docker inspect's health output and
// compose logs show that line; hbx as PID 1 still reaps orphans.
func TestDockerBadConfig(t *testing.T) {
	s := requireDocker(t)
	b := s.newBox(t, "bad", boxOptions{config: badPort})
	b.compose("up", "-d", "executor")
	line := b.waitHeld(1, 1)
	t.Logf("hbx's error in compose logs and the health output: %s", line)
	b.exec("executor", "sh", "-c", "sleep 1 & exit 0")
	deadline := time.Now().Add(30 * time.Second)
	for strings.Contains(b.exec("executor", "sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null"), "(sleep)") {
		if time.Now().After(deadline) {
			t.Fatal("the orphaned sleep is still in the process table after 30s (the holding hbx did not reap it)")
		}
		time.Sleep(500 * time.Millisecond)
	}
	b.noZombies("after an orphan exited under the holding hbx")
	// docker stop: the hold ends at once with the error's status.
	start := time.Now()
	b.compose("stop", "executor")
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("compose stop of the holding hbx took %v, want well under the 45s grace period", took)
	}
	if got := b.inspect("executor", "{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}"); got != "exited 2 0" {
		t.Errorf("executor after compose stop: %s, want exited 2 0 (the invalid configuration's status, never restarted)", got)
	}
}

// badPort makes the config file invalid: executor.port 0.
func badPort(c string) string { return strings.Replace(c, "  port: 4788\n", "  port: 0\n", 1) }

// waitHeld waits until the executor of a box with a bad config is
// unhealthy, checks that its container runs (never restarted, in its first
// run: starts 1) and that compose logs hold hbx's one-line error lines
// times (once per start, once more at each exit) and the last health
// output that same line; it returns the line.
func (b *box) waitHeld(starts, lines int) string {
	b.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var h healthLog
	for {
		h = b.health()
		if h.Status == "unhealthy" {
			break
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("executor health %q within 3m, want unhealthy: %+v", h.Status, h)
		}
		time.Sleep(time.Second)
	}
	if got := b.inspect("executor", "{{.State.Status}}"); got != "running" {
		b.t.Errorf("executor container: %s, want running (hbx holds on its error)", got)
	}
	if got := b.inspect("executor", "{{.RestartCount}}"); starts == 1 && got != "0" {
		b.t.Errorf("executor container restarted %s times, want 0 (hbx holds on its error)", got)
	}
	logs := b.logs()
	re := regexp.MustCompile(`(?m)^\S+\s+\|\s+(hbx: .*executor\.port.*)$`)
	m := re.FindAllStringSubmatch(logs, -1)
	if len(m) != lines {
		b.t.Fatalf("compose logs: %d lines naming executor.port, want %d:\n%s", len(m), lines, logs)
	}
	line := strings.TrimSpace(m[0][1])
	last := h.Log[len(h.Log)-1]
	if last.ExitCode == 0 || !strings.Contains(last.Output, line) {
		b.t.Errorf("docker inspect's last health output (exit %d) does not hold hbx's line %q:\n%s", last.ExitCode, line, last.Output)
	}
	return line
}

// TestDockerUnreachableRegistry: with no route to the registry, the whole
// box's `up -d --wait` fails within seconds (the agent's depends_on no
// longer waits out a start period): hbx stays up (the container is not
// restarted), the container is unhealthy, and the install's one-line
// error, with hbx install's offline hint, is in compose logs and in docker
// inspect's health output. The config volume holds only the box's
// hbx.yaml and what the image ships (its empty certs.d), as after the
// README's steps.
func TestDockerUnreachableRegistry(t *testing.T) {
	s := requireDocker(t)
	b := s.newBox(t, "noreg", boxOptions{noRegistry: true})
	start := time.Now()
	out, err := b.composeErr(5*time.Minute, "up", "-d", "--wait", "--wait-timeout", "240")
	took := time.Since(start)
	t.Logf("MEASURE up -d --wait with the registry unreachable: failed after %v", took.Round(time.Millisecond))
	if err == nil {
		t.Fatalf("up -d --wait with the registry unreachable succeeded:\n%s", out)
	}
	// Generous for a loaded machine, far below the 10 minutes a start
	// period kept it waiting.
	if took > 2*time.Minute {
		t.Errorf("up -d --wait failed after %v, want well under 2m", took)
	}
	if !strings.Contains(err.Error(), "unhealthy") {
		t.Errorf("up -d --wait: %v, want it to say the executor is unhealthy", err)
	}
	h := b.health()
	if h.Status != "unhealthy" {
		t.Errorf("executor health after the failed up: %q, want unhealthy", h.Status)
	}
	if got := b.inspect("executor", "{{.State.Status}} {{.RestartCount}}"); got != "running 0" {
		t.Errorf("executor container: %s, want running 0 (hbx stays up)", got)
	}
	if got := b.inspect("agent", "{{.State.Status}}"); got != "created" {
		t.Errorf("agent container: %s, want created (never started)", got)
	}
	const hint = "offline: hbx install --from FILE"
	last := h.Log[len(h.Log)-1].Output
	if !strings.Contains(last, "registry.hbx.test") || !strings.Contains(last, hint) {
		t.Errorf("docker inspect health output does not name the registry and the offline hint:\n%s", last)
	}
	logs := b.logs()
	if !strings.Contains(logs, "registry.hbx.test") || !strings.Contains(logs, hint) {
		t.Errorf("compose logs do not name the registry and the offline hint:\n%s", tail(logs))
	}
	// The image ships /etc/hbx/certs.d (registry.certs_dir of
	// deploy/hbx.yaml): the install gets as far as the registry.
	if strings.Contains(logs, "bad registry.certs_dir") || strings.Contains(last, "bad registry.certs_dir") {
		t.Errorf("install failed on registry.certs_dir before reaching the registry:\n%s", tail(logs))
	}
	t.Logf("health output:\n%s", last)
}

// executorPID is the running executor program's pid from hbx status --json.
func executorPID(t *testing.T, b *box) string {
	t.Helper()
	pid := runningPID(t, b)
	if pid == "" {
		t.Fatal("hbx status: executor is not RUNNING")
	}
	return pid
}

// runningPID is the executor's pid when hbx status says RUNNING, else "".
func runningPID(t *testing.T, b *box) string {
	t.Helper()
	var progs []struct {
		Name  string
		State string
		PID   int `json:"pid"`
	}
	// hbx status exits 3 while a program is not RUNNING; its list is on
	// stdout either way.
	out, err := b.execErr("executor", "hbx", "status", "--json")
	if jerr := json.Unmarshal([]byte(out), &progs); jerr != nil {
		t.Fatalf("hbx status --json: %v (%v)", jerr, err)
	}
	for _, p := range progs {
		if p.Name == "executor" && p.State == "RUNNING" && p.PID > 0 {
			return itoa(p.PID)
		}
	}
	return ""
}

// checkRelease: the box serves version and its config file pins ref.
func checkRelease(t *testing.T, b *box, version, ref string) {
	t.Helper()
	if code, body := b.hostGet("/"); code != 200 || !strings.Contains(body, version) {
		t.Errorf("GET / = %d, want 200 naming %s:\n%s", code, version, body)
	}
	if cfg := b.exec("executor", "cat", "/etc/hbx/hbx.yaml"); !strings.Contains(cfg, ref) {
		t.Errorf("config volume's hbx.yaml does not pin %s", ref)
	}
	b.exec("executor", "hbx", "health", "--only", "api-health,mcp-auth,mcp-tools,supervisor,release")
}

// networks maps a container's network names to its addresses.
func networks(t *testing.T, b *box) map[string]string {
	t.Helper()
	var nets map[string]struct{ IPAddress string }
	if err := json.Unmarshal([]byte(b.inspect("executor", "{{json .NetworkSettings.Networks}}")), &nets); err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for k, v := range nets {
		m[k] = v.IPAddress
	}
	return m
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestDockerEngineRestart: dockerd stopped (SIGTERM, as at a host
// shutdown; no `docker stop`, which would count as stopped by the
// operator) and started again by scripts/dockerdeps.sh: a healthy box comes
// back healthy with its agent (restart: unless-stopped; hbx exited 0 on
// the daemon's SIGTERM), and a box holding on a bad config comes back
// holding on it, unhealthy with its error. A real daemon restart, not
// `docker restart`: only the daemon's own restore applies the restart
// policy to containers that stopped with it.
func TestDockerEngineRestart(t *testing.T) {
	s := requireDocker(t)
	a := s.newBox(t, "reboot", boxOptions{})
	a.upWait()
	bad := s.newBox(t, "rebootbad", boxOptions{config: badPort})
	bad.compose("up", "-d", "executor")
	bad.waitHeld(1, 1)
	before := map[string]string{}
	for _, b := range []*box{a, bad} {
		before[b.name] = b.inspect("executor", "{{.State.StartedAt}}")
	}

	restarted := s.restartEngine(t)
	t.Logf("dockerd stopped and started again in %v", restarted.Round(time.Millisecond))

	since := time.Now()
	for _, b := range []*box{a, bad} {
		deadline := time.Now().Add(3 * time.Minute)
		for b.inspect("executor", "{{.State.Status}} {{.State.StartedAt}}") == "running "+before[b.name] ||
			!strings.HasPrefix(b.inspect("executor", "{{.State.Status}}"), "running") {
			if time.Now().After(deadline) {
				t.Fatalf("executor of %s not started again within 3m of the engine's restart: %s", b.project,
					b.inspect("executor", "{{.State.Status}} {{.State.ExitCode}} {{.State.StartedAt}}"))
			}
			time.Sleep(time.Second)
		}
	}
	end := a.waitHealthySince(since, 4*time.Minute)
	t.Logf("healthy box back healthy %v after the engine came up", end.Sub(since).Round(time.Millisecond))
	if got := a.inspect("agent", "{{.State.Status}}"); got != "running" {
		t.Errorf("agent of %s after the engine's restart: %s, want running", a.project, got)
	}
	if code, body := a.hostGet("/api/health"); code != 200 {
		t.Errorf("GET /api/health on the published port after the engine's restart = %d %s", code, body)
	}
	a.noZombies("after the engine's restart")
	// Held again: a line at the hold, one at its exit, one at the new hold.
	bad.waitHeld(2, 3)
}

// restartEngine stops this suite's dockerd with SIGTERM (its pidfile is
// beside the socket of DOCKER_HOST, see scripts/dockerdeps.sh), waits for
// it to exit, starts it again with scripts/dockerdeps.sh and starts the
// registry container again (it has no restart policy). It returns how
// long that took.
func (s *suite) restartEngine(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	sock := strings.TrimPrefix(os.Getenv("DOCKER_HOST"), "unix://")
	pidfile := filepath.Join(filepath.Dir(sock), "dockerd.pid")
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatalf("dockerd's pidfile: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("dockerd's pidfile %s: %v", pidfile, err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stop dockerd %d: %v", pid, err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("dockerd %d still running 3m after SIGTERM", pid)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cmd := exec.Command(filepath.Join(s.root, "scripts/dockerdeps.sh"))
	cmd.Dir = s.root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start dockerd again: %v\n%s", err, out)
	}
	if _, err := run(context.Background(), "", nil, "start", s.regName); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// TestDockerNoPtrace: without CAP_SYS_PTRACE (cap_add reset) hbx, root,
// cannot read the open files of Executor, which runs as the user
// executor: readiness and the listeners check say so and name the
// capability, never "listens on nothing".
func TestDockerNoPtrace(t *testing.T) {
	s := requireDocker(t)
	b := s.newBox(t, "noptrace", boxOptions{override: "services:\n  executor:\n    cap_add: !reset []\n"})
	if got := b.inspect("executor", "{{.HostConfig.CapAdd}}"); strings.Contains(got, "PTRACE") {
		t.Fatalf("executor's cap_add = %s, want no SYS_PTRACE", got)
	}
	b.compose("up", "-d", "executor")
	deadline := time.Now().Add(4 * time.Minute)
	want := "open files: "
	var out string
	for {
		out, _ = b.execErr("executor", "hbx", "health", "--only", "listeners")
		if strings.Contains(out, "cannot read pid ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hbx health --only listeners did not say it cannot read Executor's open files within 4m:\n%s", out)
		}
		time.Sleep(time.Second)
	}
	if !strings.Contains(out, want) || !strings.Contains(out, "permission denied") || !strings.Contains(out, "CAP_SYS_PTRACE") || strings.Contains(out, "listens on nothing") {
		t.Errorf("hbx health --only listeners:\n%s\nwant it to say it cannot read the open files (permission denied) and name CAP_SYS_PTRACE", out)
	}
	t.Logf("listeners without CAP_SYS_PTRACE: %s", strings.TrimSpace(out))
	// Readiness says the same: hbx status's executor line. (Docker's
	// healthcheck, hbx health --wait-start, waits while hbx retries the
	// start, and shows the line once the executor is FATAL.)
	deadline = time.Now().Add(2 * time.Minute)
	for {
		out, _ := b.execErr("executor", "hbx", "status")
		if strings.Contains(out, "STARTING") && strings.Contains(out, "cannot read pid ") && strings.Contains(out, "CAP_SYS_PTRACE") {
			t.Logf("hbx status: %s", strings.TrimSpace(out))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hbx status never named the unreadable open files:\n%s", out)
		}
		time.Sleep(time.Second)
	}
}

// TestDockerTree: today's Executor (testimage.ShapeTree: a workerd child
// that ignores SIGTERM on a loopback side port, a loopback tool bridge,
// tools execute, skills, resume) in the Docker box, exposed to the
// network: healthy, hbx health passing with its side ports named, the
// agent listing the three tools; kill -9 of its Bun and it is healthy
// again, the old child gone.
func TestDockerTree(t *testing.T) {
	s := requireDocker(t)
	b := s.newBox(t, "tree", boxOptions{config: func(c string) string {
		c = strings.Replace(c, s.refV1, s.refTree, 1)
		c = strings.Replace(c, s.pinV1, s.pinTree, 1)
		return strings.Replace(c, "health:\n", "health:\n  mcp_tools: [execute, skills, resume]\n", 1)
	}})
	took := b.upWait()
	t.Logf("MEASURE tree-shaped executor: up --wait %v", took.Round(time.Millisecond))
	if st := b.inspect("executor", "{{.State.Health.Status}}"); st != "healthy" {
		t.Fatalf("executor health after up --wait = %q, want healthy", st)
	}
	out := b.exec("executor", "hbx", "health")
	if strings.Contains(out, "fail ") || !strings.Contains(out, "0.0.0.0:4788 and 2 loopback side ports of its tree") {
		t.Errorf("hbx health in the tree box:\n%s\nwant every check passing, the 2 side ports named", out)
	}
	t.Logf("hbx health:\n%s", out)
	if got := b.exec("agent", "agentprobe", "mcp", "http://executor:4788/mcp", "/run/secrets/mcp_key"); !strings.Contains(got, "tools=execute,resume,skills\n") && !strings.Contains(got, "tools=execute,skills,resume\n") {
		t.Errorf("agent MCP with the key: %q, want the tools execute, skills, resume", got)
	}

	// kill -9 of Bun: its workerd is stopped at once, healthy again.
	pid := executorPID(t, b)
	workerd := strings.TrimSpace(b.exec("executor", "sh", "-c", "cat /proc/"+pid+"/task/*/children"))
	killed := time.Now()
	b.exec("executor", "sh", "-c", "kill -9 "+pid)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if out, err := b.execErr("executor", "hbx", "health", "--only", "api-health,supervisor,listeners"); err == nil {
			t.Logf("MEASURE tree-shaped executor: kill -9 of Bun -> hbx health passing again in %v (an exec per probe)", time.Since(killed).Round(time.Millisecond))
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("not healthy again 2m after kill -9:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, w := range strings.Fields(workerd) {
		if out, _ := b.execErr("executor", "sh", "-c", "cat /proc/"+w+"/stat 2>/dev/null"); strings.Contains(out, "(bun)") && !strings.Contains(out, ") Z") {
			t.Errorf("the old workerd %s survived its Bun's kill -9: %s", w, out)
		}
	}
	b.noZombies("after kill -9 of the tree's Bun")
}

// TestDockerNoCgroupFallback: in the executor container hbx cannot make
// cgroups (the engine mounts no writable cgroup v2 hierarchy there), so
// the supervised programs run without one: hbx status says so, today's
// Executor (a workerd child that ignores SIGTERM) still starts healthy,
// hbx stop leaves none of its processes (process group and marker find
// them), and it starts again.
func TestDockerNoCgroupFallback(t *testing.T) {
	s := requireDocker(t)
	b := s.newBox(t, "nocg", boxOptions{config: func(c string) string {
		c = strings.Replace(c, s.refV1, s.refTree, 1)
		c = strings.Replace(c, s.pinV1, s.pinTree, 1)
		return strings.Replace(c, "health:\n", "health:\n  mcp_tools: [execute, skills, resume]\n", 1)
	}})
	b.upWait()
	if st := b.inspect("executor", "{{.State.Health.Status}}"); st != "healthy" {
		t.Fatalf("executor health after up --wait = %q, want healthy", st)
	}
	if out := b.exec("executor", "sh", "-c", "hbx status 2>&1"); !strings.Contains(out, "hbx: note: no cgroups: ") || !strings.Contains(out, "processes are found by process group and marker alone") {
		t.Errorf("hbx status in the executor container:\n%s\nwant the note that programs run without cgroups", out)
	}
	bun := "for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = bun ] && echo ${p#/proc/}; done; true"
	if got := strings.Fields(b.exec("executor", "sh", "-c", bun)); len(got) < 2 {
		t.Fatalf("bun processes before the stop = %v, want Bun and its workerd", got)
	}
	b.exec("executor", "hbx", "stop", "executor")
	if got := strings.Fields(b.exec("executor", "sh", "-c", bun)); len(got) != 0 {
		t.Errorf("bun processes after hbx stop executor = %v, want none", got)
	}
	b.exec("executor", "hbx", "start", "executor")
	if out, err := b.execErr("executor", "hbx", "health", "--wait", "120s", "--only", "api-health,supervisor,listeners"); err != nil {
		t.Errorf("hbx health after hbx start executor:\n%s", out)
	}
	b.noZombies("after a stop and start without cgroups")
}
