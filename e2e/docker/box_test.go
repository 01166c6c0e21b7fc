// SPDX-License-Identifier: Apache-2.0

package docker

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// box is one Compose project of deploy/compose.yaml.
type box struct {
	s        *suite
	t        *testing.T
	name     string // BOX
	project  string // hbx-<BOX>, from the compose file's name:
	dir      string
	env      []string
	hostPort int
	regNet   string // the network that joins this box's executor to the registry
}

// boxOptions shape a box's config file and environment.
type boxOptions struct {
	config     func(string) string // edits the config file written to the config volume
	noRegistry bool                // the executor does not join the registry, and certs.d stays the image's
	override   string              // a compose file of the box's own (compose.box.yaml, after the registry's)
}

// newBox writes a box's files (config from deploy/hbx.yaml with the test
// image's pin, the registry CA in certs.d, its key and passphrase) and
// creates its containers and volumes without starting them; the config
// goes into the config volume. t.Cleanup removes everything.
func (s *suite) newBox(t *testing.T, name string, opts boxOptions) *box {
	t.Helper()
	b := &box{s: s, t: t, name: s.id + name, dir: t.TempDir(), hostPort: freePort(t)}
	b.project = "hbx-" + b.name
	mustWrite(t, filepath.Join(b.dir, "mcp.key"), randomHex(t, 32)+"\n", 0o600)
	mustWrite(t, filepath.Join(b.dir, "backup.pass"), randomHex(t, 16)+"\n", 0o600)
	cfg, err := os.ReadFile(filepath.Join(s.root, "deploy/hbx.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c := replaceOnce(t, string(cfg), "  install_on_start: true\n", fmt.Sprintf(
		"  install_on_start: true\n  image: %s\n  platform_digests:\n    linux/amd64: %s\n", s.refV1, s.pinV1))
	c = replaceOnce(t, c, `  token_file: ""`+"\n", "  token_file: /run/secrets/mcp_key\n")
	c = replaceOnce(t, c, `  token_env: ""`+"\n", "  token_env: EXECUTOR_AUTH_TOKEN\n")
	if opts.config != nil {
		c = opts.config(c)
	}
	etc := filepath.Join(b.dir, "etc")
	mustWrite(t, filepath.Join(etc, "hbx.yaml"), c, 0o644)
	if !opts.noRegistry {
		// Without it the config volume's certs.d is the image's own
		// (empty), as on a box started by the README's steps.
		mustWrite(t, filepath.Join(etc, "certs.d", registryHost, "ca.crt"), string(s.caPEM), 0o644)
	}

	own := "services: {}\n"
	if opts.override != "" {
		own = opts.override
	}
	mustWrite(t, filepath.Join(b.dir, "compose.box.yaml"), own, 0o644)
	override := "services: {}\n"
	if !opts.noRegistry {
		b.regNet = b.name + "-registry"
		ctx := context.Background()
		if _, err := run(ctx, "", nil, "network", "create", b.regNet); err != nil {
			t.Fatal(err)
		}
		if _, err := run(ctx, "", nil, "network", "connect", "--alias", "registry.hbx.test", b.regNet, s.regName); err != nil {
			t.Fatal(err)
		}
		override = fmt.Sprintf(`services:
  executor:
    networks: [box, registry]
networks:
  registry:
    name: %s
    external: true
`, b.regNet)
	}
	mustWrite(t, filepath.Join(b.dir, "compose.test.yaml"), override, 0o644)
	b.env = []string{
		"BOX=" + b.name,
		"HOST_PORT=" + strconv.Itoa(b.hostPort),
		"EXECUTOR_IMAGE=" + s.execImg,
		"AGENT_IMAGE=" + s.agentImg,
		"MCP_KEY_FILE=" + filepath.Join(b.dir, "mcp.key"),
		"BACKUP_PASSPHRASE_FILE=" + filepath.Join(b.dir, "backup.pass"),
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := b.composeErr(2*time.Minute, "logs", "--no-color", "--timestamps")
			t.Logf("docker compose logs of %s:\n%s", b.project, tail(out))
			if out, err := b.composeErr(time.Minute, "exec", "-T", "executor", "sh", "-c", "tail -n 30 /var/log/hbx/*.log"); err == nil {
				t.Logf("hbx's program logs in %s's executor:\n%s", b.project, out)
			}
		}
		if _, err := b.composeErr(3*time.Minute, "down", "-v", "--timeout", "45"); err != nil {
			t.Errorf("compose down: %v", err)
		}
		if b.regNet != "" {
			run(context.Background(), "", nil, "network", "disconnect", "-f", b.regNet, s.regName)
			run(context.Background(), "", nil, "network", "rm", b.regNet)
		}
	})
	b.compose("up", "--no-start")
	b.installConfig()
	return b
}

// with returns the box reporting to t (a subtest's).
func (b *box) with(t *testing.T) *box {
	c := *b
	c.t = t
	return &c
}

// installConfig copies the box's etc/ into the config volume (/etc/hbx) of
// its created executor container.
func (b *box) installConfig() {
	b.t.Helper()
	if _, err := run(context.Background(), "", nil, "cp", filepath.Join(b.dir, "etc")+"/.", b.container("executor")+":/etc/hbx/"); err != nil {
		b.t.Fatal(err)
	}
}

// compose runs docker compose on the box and fails the test on error.
func (b *box) compose(args ...string) string {
	b.t.Helper()
	out, err := b.composeErr(5*time.Minute, args...)
	if err != nil {
		b.t.Fatal(err)
	}
	return out
}

func (b *box) composeErr(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	full := append([]string{"compose", "-f", filepath.Join(b.s.root, "deploy/compose.yaml"), "-f", filepath.Join(b.dir, "compose.test.yaml"), "-f", filepath.Join(b.dir, "compose.box.yaml")}, args...)
	return run(ctx, b.dir, b.env, full...)
}

// exec runs a command in a service's container (no TTY) and returns its
// stdout, failing the test on error.
func (b *box) exec(service string, argv ...string) string {
	b.t.Helper()
	out, err := b.execErr(service, argv...)
	if err != nil {
		b.t.Fatal(err)
	}
	return out
}

func (b *box) execErr(service string, argv ...string) (string, error) {
	return b.composeErr(5*time.Minute, append([]string{"exec", "-T", service}, argv...)...)
}

// container returns the id of a service's container (running or not).
func (b *box) container(service string) string {
	b.t.Helper()
	out := strings.TrimSpace(b.compose("ps", "-a", "-q", service))
	if out == "" || strings.Contains(out, "\n") {
		b.t.Fatalf("container of %s in %s: got %q, want one id", service, b.project, out)
	}
	return out
}

// inspect returns docker inspect's template output for a service's container.
func (b *box) inspect(service, format string) string {
	b.t.Helper()
	out, err := run(context.Background(), "", nil, "inspect", "--format", format, b.container(service))
	if err != nil {
		b.t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// upWait starts the box with `up -d --wait` and returns how long it took.
func (b *box) upWait() time.Duration {
	b.t.Helper()
	start := time.Now()
	b.compose("up", "-d", "--wait", "--wait-timeout", "240")
	return time.Since(start)
}

// healthLog is the executor's healthcheck history.
type healthLog struct {
	Status        string
	FailingStreak int
	Log           []struct {
		Start, End time.Time
		ExitCode   int
		Output     string
	}
}

func (b *box) health() healthLog {
	b.t.Helper()
	var h healthLog
	if err := json.Unmarshal([]byte(b.inspect("executor", "{{json .State.Health}}")), &h); err != nil {
		b.t.Fatal(err)
	}
	return h
}

// waitHealthySince waits until a healthcheck that started after since
// passed, and returns when it ended.
func (b *box) waitHealthySince(since time.Time, limit time.Duration) time.Time {
	b.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		h := b.health()
		for _, l := range h.Log {
			if l.ExitCode == 0 && l.Start.After(since) && h.Status == "healthy" {
				return l.End
			}
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("executor of %s: no passing healthcheck since %v within %v; health %+v", b.project, since.Format(time.RFC3339Nano), limit, h)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// noZombies fails the test when a process in the executor container is a
// zombie (state Z in /proc/PID/stat).
func (b *box) noZombies(when string) {
	b.t.Helper()
	out := b.exec("executor", "sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		i := strings.LastIndexByte(line, ')')
		if i < 0 || i+2 >= len(line) {
			continue
		}
		if line[i+2] == 'Z' {
			b.t.Errorf("%s: zombie in the executor container: %s", when, line)
		}
	}
}

// logs returns the executor's container log.
func (b *box) logs() string {
	b.t.Helper()
	return b.compose("logs", "--no-color", "executor")
}

func (b *box) key() string {
	b.t.Helper()
	k, err := os.ReadFile(filepath.Join(b.dir, "mcp.key"))
	if err != nil {
		b.t.Fatal(err)
	}
	return strings.TrimSpace(string(k))
}

// hostGet GETs path on the box's published port from the host.
func (b *box) hostGet(path string) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", b.hostPort, path), nil)
	req.Header.Set("Authorization", "Bearer "+b.key())
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		b.t.Fatalf("GET %s on the published port: %v", path, err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 64<<10)
	n, _ := resp.Body.Read(buf)
	sb.Write(buf[:n])
	return resp.StatusCode, sb.String()
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

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

func mustWrite(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if strings.Count(s, old) != 1 {
		t.Fatalf("deploy/hbx.yaml: want exactly one %q", old)
	}
	return strings.Replace(s, old, new, 1)
}

// gpgDecryptTar decrypts archive with the host's gpg and lists or reads it
// with the host's tar: `gpg -d | tar -xzO ./name`.
func gpgDecryptTar(t *testing.T, archive, passFile, name string) string {
	t.Helper()
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Fatal("gpg is not installed (apt-get install gnupg)")
	}
	home, err := os.MkdirTemp("", "gpg")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		kill := exec.Command("gpgconf", "--kill", "gpg-agent")
		kill.Env = append(os.Environ(), "GNUPGHOME="+home)
		_ = kill.Run()
		os.RemoveAll(home)
	}()
	cmd := exec.Command("sh", "-ec", `gpg --batch --no-tty --quiet --pinentry-mode loopback --passphrase-file "$2" -d "$1" | tar -xzO "$3"`, "sh", archive, passFile, name)
	cmd.Env = append(os.Environ(), "GNUPGHOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpg -d %s | tar -xzO %s: %v\n%s", archive, name, err, out)
	}
	return string(out)
}
