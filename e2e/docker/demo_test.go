// SPDX-License-Identifier: Apache-2.0

package docker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDockerDemo runs `make docker-demo` (scripts/docker-demo.sh) from a
// fresh clone of this commit, on the suite's engine, with the clone's
// .cache the repository's (a warm cache, as in every worktree): the box
// comes up healthy, the script prints the hbx box commands to try, plain
// docker compose works in the box directory, the placeholder agent stops
// on SIGTERM within 5 s, the "Try next" lines it prints all succeed as
// written in a shell without the caller's DOCKER_HOST or DEMO_NAME (its
// engine line, box save and load, and its own down line), and that down
// leaves no container, volume or network of the demo behind.
func TestDockerDemo(t *testing.T) {
	s := requireDocker(t)
	clone := filepath.Join(t.TempDir(), "hbx")
	head, err := exec.Command("git", "-C", s.root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	for _, argv := range [][]string{
		{"git", "clone", "--quiet", "--no-checkout", s.root, clone},
		{"git", "-C", clone, "checkout", "--quiet", strings.TrimSpace(string(head))},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	if err := os.Symlink(filepath.Join(s.root, ".cache"), filepath.Join(clone, ".cache")); err != nil {
		t.Fatal(err)
	}
	name := s.id + "demo"
	env := append(os.Environ(), "DEMO_NAME="+name)
	script := func(timeout time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory"}, args...)...)
		if args[0] == "down" {
			cmd = exec.CommandContext(ctx, "scripts/docker-demo.sh", "down")
		}
		cmd.Dir, cmd.Env = clone, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if out, err := script(5*time.Minute, "down"); err != nil {
			t.Errorf("docker-demo.sh down: %v\n%s", err, out)
		}
		demoLeftovers(t, "docker-demo.sh down", name)
		run(context.Background(), "", nil, "image", "rm", "-f", "hbx-"+name+"-executor", "hbx-"+name+"-agent", "hbx-"+name+"-registry")
	})

	start := time.Now()
	out, err := script(20*time.Minute, "docker-demo")
	t.Logf("MEASURE make docker-demo from a fresh clone (warm cache): %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("make docker-demo: %v\n%s", err, tail(out))
	}
	for _, want := range []string{"docker-demo: OK", "hbx box ls", "hbx box doctor " + name, "healthy in "} {
		if !strings.Contains(out, want) {
			t.Errorf("make docker-demo's output lacks %q:\n%s", want, tail(out))
		}
	}
	dir := filepath.Join(clone, ".run/docker-demo/boxes", name)
	compose := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("docker", append([]string{"compose"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("docker compose %s in the box directory: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if got := compose("ps", "--format", "{{.Service}} {{.Health}}", "executor"); strings.TrimSpace(got) != "executor healthy" {
		t.Errorf("docker compose ps in the box directory: %q, want executor healthy", got)
	}
	// Compose's stop timeout is 10 s, then SIGKILL (exit 137): the
	// placeholder must end on the SIGTERM itself.
	began := time.Now()
	compose("stop", "agent")
	took := time.Since(began)
	id := strings.TrimSpace(compose("ps", "-a", "-q", "agent"))
	code, err := run(context.Background(), "", nil, "inspect", "--format", "{{.State.ExitCode}}", id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MEASURE docker compose stop agent (placeholder sleep infinity): %v, exit %s", took.Round(time.Millisecond), strings.TrimSpace(code))
	if strings.TrimSpace(code) == "137" || took > 9*time.Second {
		t.Errorf("docker compose stop agent: exit %s after %v, want it ended by SIGTERM, not SIGKILL after the 10s timeout (init: true)", strings.TrimSpace(code), took)
	}
	compose("up", "-d", "--wait", "agent")
	tryNext(t, clone, out)
	demoLeftovers(t, "the printed down line", name)
}

// tryNext runs the lines make docker-demo printed under "Try next" (its
// output out), but the $EDITOR one, as one bash -e script in the clone, as
// an operator pastes them into a new shell: without the suite's DOCKER_HOST
// and DOCKER_CONFIG, DEMO_NAME or HBX_BOX_ROOT.
func tryNext(t *testing.T, clone, out string) {
	t.Helper()
	_, after, ok := strings.Cut(out, "==> Try next\n")
	block, _, ok2 := strings.Cut(after, "\ndocker-demo: OK")
	if !ok || !ok2 {
		t.Fatalf("make docker-demo's output has no Try next block:\n%s", tail(out))
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimPrefix(l, "    "); l != "" && !strings.Contains(l, "$EDITOR") {
			lines = append(lines, l)
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "DOCKER_HOST", "DOCKER_CONFIG", "DEMO_NAME", "HBX_BOX_ROOT":
		default:
			env = append(env, kv)
		}
	}
	// A file, not standard input: docker compose exec reads its stdin.
	file := filepath.Join(t.TempDir(), "trynext.sh")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-ex", file)
	cmd.Dir, cmd.Env = clone, env
	began := time.Now()
	got, err := cmd.CombinedOutput()
	t.Logf("MEASURE the Try next lines (doctor, stop/start, save, load, rm, down): %v", time.Since(began).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("the Try next lines of make docker-demo, pasted into a new shell: %v\n%s", err, tail(string(got)))
	}
}

// demoLeftovers fails t for each container, volume or network of the demo
// NAME (its box or the NAME-copy box the Try next lines load) left behind
// after what (a down).
func demoLeftovers(t *testing.T, what, name string) {
	t.Helper()
	for _, args := range [][]string{
		{"ps", "-a", "-q", "--filter", "label=com.docker.compose.project=hbx-" + name},
		{"ps", "-a", "-q", "--filter", "label=com.docker.compose.project=hbx-" + name + "-copy"},
		{"volume", "ls", "-q", "--filter", "label=com.docker.compose.project=hbx-" + name},
		{"volume", "ls", "-q", "--filter", "label=com.docker.compose.project=hbx-" + name + "-copy"},
		{"network", "ls", "-q", "--filter", "name=hbx-" + name},
	} {
		if out, err := run(context.Background(), "", nil, args...); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("after %s, docker %s: %q, %v; want nothing", what, strings.Join(args, " "), out, err)
		}
	}
}
