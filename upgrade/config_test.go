package upgrade

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/config"
)

// TestGateChecks: the checks that gate a change, mcp-tools only with a
// key and never twice.
func TestGateChecks(t *testing.T) {
	d := config.Defaults()
	c := &d
	base := []string{c.Health.Readiness, "mcp-auth", "supervisor", "release"}
	if got := GateChecks(c); !slices.Equal(got, base) {
		t.Errorf("without a key: %v, want %v", got, base)
	}
	c.Health.TokenFile = "/k"
	if got := GateChecks(c); !slices.Equal(got, append(slices.Clone(base), "mcp-tools")) {
		t.Errorf("with a key: %v, want mcp-tools last", got)
	}
	c.Health.Readiness = "mcp-tools"
	if got := GateChecks(c); !slices.Equal(got, []string{"mcp-tools", "mcp-auth", "supervisor", "release"}) {
		t.Errorf("readiness mcp-tools: %v, want it once", got)
	}
}

// TestToolsInAndPinned: the tool set in force once r is pinned, and the
// configuration with r pinned, leaving cfg as it was.
func TestToolsInAndPinned(t *testing.T) {
	d := config.Defaults()
	c := &d
	c.Health.MCPTools = []string{"execute"}
	for _, tc := range []struct {
		name       string
		tools      *Tools
		overridden bool
		want       []string
	}{
		{"not recorded", nil, false, []string{"execute"}},
		{"recorded default", &Tools{}, false, defaultTools()},
		{"recorded", &Tools{Names: []string{"a", "b"}}, false, []string{"a", "b"}},
		{"overridden", &Tools{Names: []string{"a", "b"}}, true, []string{"execute"}},
	} {
		r := oldRel
		r.MCPTools = tc.tools
		if got := ToolsIn(c, r, tc.overridden); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ToolsIn = %v, want %v", tc.name, got, tc.want)
		}
	}
	p := Pinned(c, newRel)
	if p.Executor.Image != newRel.Image || p.Executor.PlatformDigests[c.PinKey()] != newRel.Manifest.String() {
		t.Errorf("Pinned = %s %v, want %s pinned to %s", p.Executor.Image, p.Executor.PlatformDigests, newRel.Image, newRel.Manifest)
	}
	if c.Executor.Image == newRel.Image || c.Executor.PlatformDigests[c.PinKey()] == newRel.Manifest.String() {
		t.Errorf("Pinned changed cfg")
	}
}

// TestConfigFilePin: Pin writes the image, the platform pin and the tool
// set in the config file, and without a file writes nothing and says
// what to set.
func TestConfigFilePin(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hbx.yaml")
	if err := os.WriteFile(path, []byte("# mine\nexecutor:\n  image: "+oldRel.Image+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := config.Defaults()
	c := &d
	r := newRel
	r.MCPTools = &Tools{Names: []string{"execute", "resume", "skills"}}
	note, err := ConfigFile{Path: path, Cfg: c}.Pin(r)
	if err != nil || note != "" {
		t.Fatalf("Pin = %q, %v", note, err)
	}
	img, m, err := config.ReadPin(path, c.PinKey())
	if err != nil || img != r.Image || digest.Digest(m) != r.Manifest {
		t.Errorf("the file pins %s %s (%v), want %s %s", img, m, err, r.Image, r.Manifest)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "# mine") || !strings.Contains(string(b), "skills") {
		t.Errorf("the file lost its comment or misses the tool set:\n%s", b)
	}
	note, err = ConfigFile{Path: filepath.Join(dir, "none.yaml"), Cfg: c}.Pin(r)
	if err != nil || !strings.Contains(note, "nothing written; set executor.image to "+r.Image) {
		t.Errorf("Pin without a file = %q, %v, want a note saying what to set", note, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "none.yaml")); err == nil {
		t.Errorf("Pin without a file created one")
	}
}

// TestCheckPinnable: an upgrade is refused before anything happens
// without a config file, or with a tool set but no key.
func TestCheckPinnable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hbx.yaml")
	d := config.Defaults()
	c := &d
	if err := CheckPinnable(path, c, nil, nil); err == nil || !strings.HasPrefix(err.Error(), "no config file at "+path) {
		t.Errorf("without a file: %v", err)
	}
	if err := os.WriteFile(path, []byte("executor: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckPinnable(path, c, nil, nil); err != nil {
		t.Errorf("with a file: %v", err)
	}
	if err := CheckPinnable(path, c, nil, []string{"execute"}); err == nil || !strings.Contains(err.Error(), "needs health.token_file") {
		t.Errorf("tools without a key: %v", err)
	}
}

// defaultTools is the default health.mcp_tools.
func defaultTools() []string { return config.Defaults().Health.MCPTools }
