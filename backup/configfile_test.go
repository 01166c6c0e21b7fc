package backup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/config"
)

// TestConfigFile: a restore's pin is read from the config file as it
// is now, written back with its comments, and refused where hbx upgrade
// refuses it (no file on disk, executor.image from an HBX_* variable).
func TestConfigFile(t *testing.T) {
	const (
		v1 = "r.example/e:v1@sha256:1111111111111111111111111111111111111111111111111111111111111111"
		v2 = "r.example/e:v2@sha256:2222222222222222222222222222222222222222222222222222222222222222"
		m2 = digest.Digest("sha256:3333333333333333333333333333333333333333333333333333333333333333")
	)
	dir := t.TempDir()
	path := filepath.Join(dir, "hbx.yaml")
	if err := os.WriteFile(path, []byte("# keep\nexecutor:\n  image: \""+v1+"\"\n  platform: linux/amd64\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	load := func(env ...string) (*config.Config, *config.Sources) {
		t.Helper()
		cfg, srcs, err := config.Load(config.LoadOptions{Path: path, PathExplicit: true, Env: env})
		if err != nil {
			t.Fatal(err)
		}
		return cfg, srcs
	}
	cfg, srcs := load()
	p := ConfigFile{Path: path, Config: cfg, Sources: srcs}
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

	cfg, srcs = load(config.EnvName("executor.image") + "=" + v1)
	p = ConfigFile{Path: path, Config: cfg, Sources: srcs}
	if err := p.CanPin(); err == nil || !strings.Contains(err.Error(), "HBX_EXECUTOR_IMAGE") {
		t.Errorf("CanPin() with HBX_EXECUTOR_IMAGE set = %v, want a refusal naming it", err)
	}
	p = ConfigFile{Path: filepath.Join(dir, "none.yaml"), Config: cfg}
	if err := p.CanPin(); err == nil || !strings.Contains(err.Error(), "no config file") {
		t.Errorf("CanPin() without a file = %v, want a refusal", err)
	}
}
