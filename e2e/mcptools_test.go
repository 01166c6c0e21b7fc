package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testimage"
	"github.com/hermesbox/hbx/supervisor"
)

// TestUpgradeMCPToolsE2E: the MCP tool set is a policy pinned with the
// image. An upgrade from 1.0.0 (execute, resume) to an image that adds
// `skills` fails its health gate, naming the extra tool, and rolls back
// without --mcp-tools, its one error line naming the flag that accepts the
// new set (--mcp-tools execute,resume,skills); with it, the tool set is written as
// health.mcp_tools with the pin and checked; hbx rollback puts the file's
// tool set back. --mcp-tools is refused (exit 2, nothing changed) without
// health.token_file and while a flag sets health.mcp_tools.
func TestUpgradeMCPToolsE2E(t *testing.T) {
	requireE2E(t)
	b, s, v1, _, _ := upgradeBox(t)
	img := versionImage(t, "2.1.0-skills", "HBXTEST_SKILLS=1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := strings.SplitN(v1, ":v", 2)[0]
	d, err := testimage.Push(ctx, img.Dir, name+":v2.1.0-skills")
	if err != nil {
		t.Fatal(err)
	}
	skills := name + ":v2.1.0-skills@" + d.String()
	const three = "execute,resume,skills"

	// Refused before anything happens.
	unchanged := func(what string) {
		t.Helper()
		if b.configuredImage() != v1 || strings.Contains(readFile(t, b.config), "mcp_tools") {
			t.Errorf("%s changed the config file:\n%s", what, readFile(t, b.config))
		}
		if _, err := os.Stat(filepath.Join(b.runtimeDir, "upgrade.json")); err == nil {
			t.Errorf("%s wrote upgrade.json", what)
		}
		if got := b.activeVersion(); got != "1.0.0" {
			t.Errorf("%s: active version %q, want 1.0.0", what, got)
		}
	}
	r := b.hbx("upgrade", "--image", skills, "--mcp-tools", three)
	if r.code != 2 || !strings.Contains(r.stderr, "--mcp-tools needs health.token_file") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("hbx upgrade --mcp-tools without health.token_file = %d %q, want 2 and one line naming health.token_file", r.code, r.stderr)
	}
	unchanged("--mcp-tools without a key")
	keyFile := filepath.Join(b.dataDir, "api-key") // the test image writes it, mode 0600
	appendConfig(t, b, "health:\n  token_file: "+keyFile+"\n")
	r = b.hbx("--health-mcp-tools", "execute,resume", "upgrade", "--image", skills, "--mcp-tools", three)
	if r.code != 2 || !strings.Contains(r.stderr, "health.mcp_tools is set by flag") {
		t.Errorf("hbx --health-mcp-tools ... upgrade --mcp-tools = %d %q, want 2 naming the flag", r.code, r.stderr)
	}
	unchanged("--mcp-tools with the key set by a flag")
	for _, bad := range []string{"", "execute,,resume", "execute,execute"} {
		if r := b.hbx("upgrade", "--image", skills, "--mcp-tools", bad); r.code != 2 {
			t.Errorf("hbx upgrade --mcp-tools %q = %d %q, want 2", bad, r.code, r.stderr)
		}
	}
	unchanged("a bad --mcp-tools")

	// Without --mcp-tools the rehearsal sees the extra tool and refuses
	// before anything stops, naming the flag that accepts it.
	r = b.hbx("upgrade", "--image", skills)
	if r.code != 1 || !strings.Contains(r.stderr, "failed its rehearsal") || !strings.Contains(r.stderr, `unexpected "skills"`) || !strings.Contains(r.stderr, "hbx upgrade --image "+skills+" --mcp-tools "+three) {
		t.Fatalf("hbx upgrade to the skills image without --mcp-tools = %d, want 1, refused by the rehearsal, naming the extra tool and the flag\n%s", r.code, r.stderr)
	}
	unchanged("the refused rehearsal")

	// Without it (--no-rehearsal) the gate sees the extra tool and rolls back.
	r = b.hbx("upgrade", "--image", skills, "--no-rehearsal")
	if r.code != 1 || !strings.Contains(r.stderr, "rolled back") || !strings.Contains(r.stderr, `unexpected "skills"`) {
		t.Fatalf("hbx upgrade to the skills image without --mcp-tools = %d, want 1, rolled back, naming the extra tool\n%s", r.code, r.stderr)
	}
	t.Logf("refused by the gate: %s", lastLine(r.stderr))
	if last := lastLine(r.stderr); !strings.Contains(last, "rolled back") || !strings.Contains(last, "hbx upgrade --image "+skills+" --mcp-tools "+three) {
		t.Errorf("the rolled-back upgrade's last line does not name the flag that accepts the new tool set (--mcp-tools %s): %s", three, last)
	}
	if b.configuredImage() != v1 || strings.Contains(readFile(t, b.config), "mcp_tools") {
		t.Errorf("after the rolled-back upgrade the config file is not the old one:\n%s", readFile(t, b.config))
	}
	healthyAt(t, b.port, 30*time.Second)

	// With --mcp-tools: pinned, checked, healthy.
	r = b.hbx("upgrade", "--image", skills, "--mcp-tools", three)
	if r.code != 0 {
		t.Fatalf("hbx upgrade --mcp-tools %s = %d\n%s\n%s", three, r.code, r.stdout, r.stderr)
	}
	cfg := readFile(t, b.config)
	if b.configuredImage() != skills || !strings.Contains(cfg, "mcp_tools: [execute, resume, skills]") || !strings.Contains(cfg, "a comment that must survive") {
		t.Errorf("after the upgrade the config file does not pin the image and its tools:\n%s", cfg)
	}
	if r := b.hbx("health", "--only", "mcp-tools"); r.code != 0 {
		t.Errorf("hbx health --only mcp-tools after the upgrade = %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// hbx rollback: the old image, and the file's old tool set (none).
	r = b.hbx("rollback")
	if r.code != 0 {
		t.Fatalf("hbx rollback = %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if b.configuredImage() != v1 || strings.Contains(readFile(t, b.config), "mcp_tools") {
		t.Errorf("after hbx rollback the config file does not pin the old image without a tool set:\n%s", readFile(t, b.config))
	}
	healthyAt(t, b.port, 30*time.Second)
	if r := b.hbx("health", "--only", "mcp-tools"); r.code != 0 {
		t.Errorf("hbx health --only mcp-tools after the rollback = %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// With health.readiness mcp-tools, the supervisor's probe follows the
	// tool set pinned with the image: after the upgrade and after the
	// rollback the executor stays RUNNING, never found wedged.
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
	s = startSupervise(t, b, s.socket, s.dir, "env", "HBX_HEALTH_READINESS=mcp-tools")
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	steady := func(what string) {
		t.Helper()
		st := waitExecutor(t, s, 60*time.Second, "RUNNING", func(st supervisor.Status) bool { return st.State == supervisor.Running })
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) { // 15 probes
			sts, err := s.client().Status(t.Context())
			if now := statusOf(sts, "executor"); err != nil || now.State != supervisor.Running || now.PID != st.PID {
				t.Fatalf("%s: executor = %s pid %d %q (%v), want RUNNING pid %d throughout", what, now.State, now.PID, now.Detail, err, st.PID)
			}
		}
		if log := readFile(t, s.log); strings.Contains(log, "program wedged") {
			t.Fatalf("%s: the supervisor found the executor wedged:\n%s", what, log)
		}
	}
	r = b.hbx("--health-readiness", "mcp-tools", "upgrade", "--image", skills, "--mcp-tools", three)
	if r.code != 0 {
		t.Fatalf("hbx upgrade --mcp-tools with readiness mcp-tools = %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	steady("after the upgrade")
	if r := b.hbx("--health-readiness", "mcp-tools", "rollback"); r.code != 0 {
		t.Fatalf("hbx rollback with readiness mcp-tools = %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	steady("after the rollback")
}
