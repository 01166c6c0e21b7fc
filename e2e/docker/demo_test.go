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
// on SIGTERM within 5 s, and `docker-demo.sh down` leaves no container,
// volume or network of the demo behind.
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
		for _, what := range [][]string{
			{"ps", "-a", "-q", "--filter", "label=com.docker.compose.project=hbx-" + name},
			{"volume", "ls", "-q", "--filter", "label=com.docker.compose.project=hbx-" + name},
			{"network", "ls", "-q", "--filter", "name=hbx-" + name},
		} {
			if out, err := run(context.Background(), "", nil, what...); err != nil || strings.TrimSpace(out) != "" {
				t.Errorf("after docker-demo.sh down, docker %s: %q, %v; want nothing", strings.Join(what, " "), out, err)
			}
		}
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
}
