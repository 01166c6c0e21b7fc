package pinfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/config"
)

const (
	v1 = "r.example/e:v1@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	v2 = "r.example/e:v2@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	m2 = digest.Digest("sha256:3333333333333333333333333333333333333333333333333333333333333333")
)

// load loads the config file at path with env as the environment.
func load(t *testing.T, path string, env ...string) (*config.Config, *config.Sources) {
	t.Helper()
	cfg, srcs, err := config.Load(config.LoadOptions{Path: path, PathExplicit: true, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, srcs
}

// TestRestorePin: a restore's pin is read from the config file as it
// is now, written back with its comments, and refused where hbx upgrade
// refuses it (no file on disk, executor.image from an HBX_* variable).
func TestRestorePin(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hbx.yaml")
	if err := os.WriteFile(path, []byte("# keep\nexecutor:\n  image: \""+v1+"\"\n  platform: linux/amd64\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, srcs := load(t, path)
	p := File{Path: path, Config: cfg, Sources: srcs}
	if err := p.CanPin(); err != nil {
		t.Errorf("CanPin() = %v, want nil", err)
	}
	if img, man, err := p.Pinned(); err != nil || img != v1 || man != "" {
		t.Errorf("Pinned() = %q, %q, %v; want %q, \"\"", img, man, err, v1)
	}
	if err := p.Pin(v2, m2); err != nil {
		t.Fatal(err)
	}
	if img, man, err := p.Pinned(); err != nil || img != v2 || man != m2 {
		t.Errorf("Pinned() after Pin = %q, %q, %v; want %q, %q (read from the file, not the loaded config)", img, man, err, v2, m2)
	}
	if err := p.Pin(v1, ""); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if img, man, _ := p.Pinned(); img != v1 || man != "" || !strings.Contains(string(b), "# keep") {
		t.Errorf("after Pin back: %q, %q; file:\n%s", img, man, b)
	}

	cfg, srcs = load(t, path, config.EnvName("executor.image")+"="+v1)
	p = File{Path: path, Config: cfg, Sources: srcs}
	if err := p.CanPin(); err == nil || !strings.Contains(err.Error(), "HBX_EXECUTOR_IMAGE") {
		t.Errorf("CanPin() with HBX_EXECUTOR_IMAGE set = %v, want a refusal naming it", err)
	}
	if !strings.Contains(mustNote(t, p), "HBX_EXECUTOR_IMAGE") {
		t.Errorf("PinRelease with HBX_EXECUTOR_IMAGE set wrote no note naming it")
	}
	p = File{Path: filepath.Join(dir, "none.yaml"), Config: cfg}
	if err := p.CanPin(); err == nil || !strings.Contains(err.Error(), "no config file") {
		t.Errorf("CanPin() without a file = %v, want a refusal", err)
	}
}

// mustNote pins v2 with p and returns the note.
func mustNote(t *testing.T, p File) string {
	t.Helper()
	note, err := p.PinRelease(v2, m2, config.PinTools{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	return note
}

// TestPinRelease: PinRelease writes the image, the platform pin and the
// tool set in the config file, and without a file writes nothing and
// says what to set.
func TestPinRelease(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hbx.yaml")
	if err := os.WriteFile(path, []byte("# mine\nexecutor:\n  image: "+v1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := config.Defaults()
	c := &d
	note, err := File{Path: path, Config: c}.PinRelease(v2, m2, config.PinTools{Names: []string{"execute", "resume", "skills"}})
	if err != nil || note != "" {
		t.Fatalf("PinRelease = %q, %v", note, err)
	}
	img, m, err := config.ReadPin(path, c.PinKey())
	if err != nil || img != v2 || digest.Digest(m) != m2 {
		t.Errorf("the file pins %s %s (%v), want %s %s", img, m, err, v2, m2)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "# mine") || !strings.Contains(string(b), "skills") {
		t.Errorf("the file lost its comment or misses the tool set:\n%s", b)
	}
	if tools, err := (File{Path: path, Config: c}).Tools(); err != nil || strings.Join(tools, ",") != "execute,resume,skills" {
		t.Errorf("Tools() = %v, %v; want the set just pinned", tools, err)
	}
	none := File{Path: filepath.Join(dir, "none.yaml"), Config: c}
	note, err = none.PinRelease(v2, m2, config.PinTools{Keep: true})
	if err != nil || !strings.Contains(note, "nothing written; set executor.image to "+v2) {
		t.Errorf("PinRelease without a file = %q, %v, want a note saying what to set", note, err)
	}
	if _, err := os.Stat(none.Path); err == nil {
		t.Errorf("PinRelease without a file created one")
	}
	if _, err := none.Tools(); err == nil || !strings.HasPrefix(err.Error(), "read health.mcp_tools: ") {
		t.Errorf("Tools() without a file = %v, want a read error", err)
	}
}

// TestCheckUpgrade: an upgrade is refused before anything happens
// without a config file, with the pin or the tool set overridden by an
// HBX_* variable, or with a tool set but no key.
func TestCheckUpgrade(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hbx.yaml")
	d := config.Defaults()
	c := &d
	if err := (File{Path: path, Config: c}).CheckUpgrade(nil); err == nil || !strings.HasPrefix(err.Error(), "no config file at "+path) {
		t.Errorf("without a file: %v", err)
	}
	if err := os.WriteFile(path, []byte("executor: {}\nhealth:\n  token_file: /k\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (File{Path: path, Config: c}).CheckUpgrade(nil); err != nil {
		t.Errorf("with a file: %v", err)
	}
	if err := (File{Path: path, Config: c}).CheckUpgrade([]string{"execute"}); err == nil || !strings.Contains(err.Error(), "needs health.token_file") {
		t.Errorf("tools without a key: %v", err)
	}
	for _, tc := range []struct{ env, want string }{
		{config.EnvName("executor.image") + "=" + v1, "executor.image is set by"},
		{config.EnvName("health.mcp_tools") + "=execute", "--mcp-tools: health.mcp_tools is set by"},
	} {
		cfg, srcs := load(t, path, tc.env)
		f := File{Path: path, Config: cfg, Sources: srcs}
		if err := f.CheckUpgrade([]string{"execute"}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: CheckUpgrade = %v, want %q", tc.env, err, tc.want)
		}
	}
	cfg, srcs := load(t, path, config.EnvName("health.mcp_tools")+"=execute")
	if !(File{Path: path, Config: cfg, Sources: srcs}).ToolsOverridden() || (File{Path: path, Config: c}).ToolsOverridden() {
		t.Errorf("ToolsOverridden: want true only with HBX_HEALTH_MCP_TOOLS set")
	}
}
