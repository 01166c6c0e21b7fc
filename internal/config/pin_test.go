package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
)

const (
	pinImage    = "ghcr.io/rhyssullivan/executor-selfhost:v1.5.13@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	pinManifest = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

func TestWritePin(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // substrings of the result
	}{
		{
			name: "replaces and keeps comments",
			in: `# hbx config, edited by hand
executor:
  # the pinned image
  image: "ghcr.io/rhyssullivan/executor-selfhost:v1.5.12@sha256:e40b2179c005b3124e794e9a8505341db46d0a9a1631e7f3fdcd023462ecf70b" # pinned
  platform: linux/arm64
  platform_digests:
    linux/arm64: "sha256:c089ee8bffdbd81c854c3aee47a788484398694149597bc9d8863491b07e262f"
  port: 4788
`,
			want: []string{"# hbx config, edited by hand", "# the pinned image", "# pinned", `image: "` + pinImage + `"`, `linux/arm64: "` + pinManifest + `"`, "port: 4788"},
		},
		{
			name: "flow mapping grows",
			in:   "executor:\n  image: x\n  platform_digests:\n    {}\n",
			want: []string{`image: "` + pinImage + `"`, `linux/arm64: "` + pinManifest + `"`},
		},
		{
			name: "no executor section",
			in:   "# only a comment\nbackup:\n  keep: 3\n",
			want: []string{"# only a comment", "keep: 3", `image: "` + pinImage + `"`, `linux/arm64: "` + pinManifest + `"`},
		},
		{
			name: "empty file",
			in:   "",
			want: []string{`image: "` + pinImage + `"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "hbx.yaml")
			if err := os.WriteFile(p, []byte(tc.in), 0o640); err != nil {
				t.Fatal(err)
			}
			if err := WritePin(p, pinImage, "linux/arm64", pinManifest); err != nil {
				t.Fatalf("WritePin() = %v", err)
			}
			b, _ := os.ReadFile(p)
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("WritePin() result lacks %q:\n%s", w, b)
				}
			}
			if st, _ := os.Stat(p); st.Mode().Perm() != 0o640 {
				t.Errorf("mode = %v, want 0640 kept", st.Mode().Perm())
			}
			cfg, _, err := Load(LoadOptions{Path: p, PathExplicit: true})
			if err != nil {
				t.Fatalf("Load() after WritePin = %v\n%s", err, b)
			}
			if cfg.Executor.Image != pinImage || cfg.Executor.PlatformDigests["linux/arm64"] != pinManifest {
				t.Errorf("Load() after WritePin: image %q, pins %v", cfg.Executor.Image, cfg.Executor.PlatformDigests)
			}
		})
	}
}

func TestWritePinRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := WritePin(filepath.Join(dir, "missing.yaml"), pinImage, "linux/arm64", pinManifest); !errors.Is(err, ErrNoFile) {
		t.Errorf("WritePin(missing) = %v, want ErrNoFile", err)
	}
	for name, in := range map[string]string{"list": "- a\n", "executor scalar": "executor: 3\n", "bad yaml": "executor: [\n"} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		os.WriteFile(p, []byte(in), 0o600)
		if err := WritePin(p, pinImage, "linux/arm64", pinManifest); !errors.Is(err, ErrInvalid) {
			t.Errorf("WritePin(%s) = %v, want ErrInvalid", name, err)
		}
		if b, _ := os.ReadFile(p); string(b) != in {
			t.Errorf("WritePin(%s) changed the file", name)
		}
	}
}

// TestReadPinRoundTrip: ReadPin reads what WritePin wrote, and a pin
// written back with no manifest removes the platform's pin (what a restore
// undo does when the configuration had none).
func TestReadPinRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hbx.yaml")
	if err := os.WriteFile(p, []byte("# keep me\nexecutor:\n  image: old\n  platform_digests:\n    linux/amd64: \"sha256:3333333333333333333333333333333333333333333333333333333333333333\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if img, man, err := ReadPin(p, "linux/arm64"); err != nil || img != "old" || man != "" {
		t.Fatalf("ReadPin() = %q, %q, %v; want old, \"\", nil", img, man, err)
	}
	if err := WritePin(p, pinImage, "linux/arm64", pinManifest); err != nil {
		t.Fatal(err)
	}
	if img, man, err := ReadPin(p, "linux/arm64"); err != nil || img != pinImage || man != pinManifest {
		t.Fatalf("ReadPin() after WritePin = %q, %q, %v", img, man, err)
	}
	if err := WritePin(p, "old", "linux/arm64", ""); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if img, man, err := ReadPin(p, "linux/arm64"); err != nil || img != "old" || man != "" {
		t.Fatalf("ReadPin() after WritePin without manifest = %q, %q, %v\n%s", img, man, err, b)
	}
	if !strings.Contains(string(b), "# keep me") || !strings.Contains(string(b), "linux/amd64") {
		t.Errorf("WritePin without manifest dropped other content:\n%s", b)
	}
	if _, _, err := ReadPin(filepath.Join(t.TempDir(), "none.yaml"), "linux/arm64"); !errors.Is(err, ErrNoFile) {
		t.Errorf("ReadPin(missing) = %v, want ErrNoFile", err)
	}
}

// TestWritePinTools: health.mcp_tools is written with the pin in one
// write, kept, replaced with its comment, or removed; ReadMCPTools reads
// back what was written, and the file still loads.
func TestWritePinTools(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hbx.yaml")
	in := "executor:\n  image: x\nhealth:\n  # the tools of this image\n  mcp_tools: execute, resume\n  timeout: 2s\n"
	if err := os.WriteFile(p, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	read := func() []string {
		t.Helper()
		got, err := ReadMCPTools(p)
		if err != nil {
			t.Fatalf("ReadMCPTools() = %v", err)
		}
		return got
	}
	if got := read(); strings.Join(got, ",") != "execute,resume" {
		t.Errorf("ReadMCPTools(comma string) = %q", got)
	}
	if err := WritePinTools(p, pinImage, "linux/arm64", pinManifest, PinTools{Keep: true}); err != nil {
		t.Fatal(err)
	}
	if got := read(); strings.Join(got, ",") != "execute,resume" {
		t.Errorf("after Keep: %q, want execute,resume", got)
	}
	if err := WritePinTools(p, pinImage, "linux/arm64", pinManifest, PinTools{Names: []string{"execute", "resume", "skills"}}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	for _, w := range []string{"# the tools of this image", "mcp_tools: [execute, resume, skills]", "timeout: 2s", `image: "` + pinImage + `"`} {
		if !strings.Contains(string(b), w) {
			t.Errorf("after setting the tools the file lacks %q:\n%s", w, b)
		}
	}
	if got := read(); strings.Join(got, ",") != "execute,resume,skills" {
		t.Errorf("after setting: %q", got)
	}
	if _, _, err := Load(LoadOptions{Path: p, PathExplicit: true}); err != nil && strings.Contains(err.Error(), "mcp_tools") {
		t.Errorf("Load() of the written file: %v", err)
	}
	if err := WritePinTools(p, pinImage, "linux/arm64", pinManifest, PinTools{}); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != nil {
		t.Errorf("after removing: %q, want nil", got)
	}
	if b, _ := os.ReadFile(p); strings.Contains(string(b), "mcp_tools") || !strings.Contains(string(b), "timeout: 2s") {
		t.Errorf("after removing:\n%s", b)
	}
	// Removing from a file without a health section adds none.
	if err := os.WriteFile(p, []byte("executor:\n  image: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WritePinTools(p, pinImage, "linux/arm64", pinManifest, PinTools{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); strings.Contains(string(b), "health") {
		t.Errorf("removing the tool set added a health section:\n%s", b)
	}
	if err := os.WriteFile(p, []byte("health:\n  mcp_tools: {a: b}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMCPTools(p); !errors.Is(err, ErrInvalid) {
		t.Errorf("ReadMCPTools(a mapping) = %v, want ErrInvalid", err)
	}
}

func TestPinKey(t *testing.T) {
	tests := []struct {
		platform string
		digests  map[string]string
		wantKey  string
		wantPin  string
	}{
		{"linux/arm64/v8", map[string]string{"linux/arm64": "sha256:a"}, "linux/arm64", "sha256:a"},
		{"linux/arm64/v8", map[string]string{"linux/arm64/v8": "sha256:b", "linux/arm64": "sha256:a"}, "linux/arm64/v8", "sha256:b"},
		{"linux/amd64", map[string]string{"linux/arm64": "sha256:a"}, "linux/amd64", ""},
		{"linux/amd64", map[string]string{"linux/amd64": "sha256:c"}, "linux/amd64", "sha256:c"},
		{"linux/arm64/v8", nil, "linux/arm64/v8", ""},
	}
	for _, tt := range tests {
		c := &Config{}
		c.Executor.Platform, c.Executor.PlatformDigests = tt.platform, tt.digests
		if got := c.PinKey(); got != tt.wantKey {
			t.Errorf("PinKey(%s, %v) = %q, want %q", tt.platform, tt.digests, got, tt.wantKey)
		}
		if got := c.PlatformPin(); got != tt.wantPin {
			t.Errorf("PlatformPin(%s, %v) = %q, want %q", tt.platform, tt.digests, got, tt.wantPin)
		}
	}
}

// TestRelease: the configured release is the image, its index digest, the
// platform and the pin under PinKey (an os/arch pin covers its variants).
func TestRelease(t *testing.T) {
	c := Defaults()
	c.Executor.Image = pinImage
	c.Executor.Platform = "linux/arm64/v8"
	c.Executor.PlatformDigests = map[string]string{"linux/arm64": pinManifest}
	want := release.Target{Image: pinImage, IndexDigest: digest.Digest("sha256:" + strings.Repeat("1", 64)), Platform: "linux/arm64/v8", ManifestDigest: pinManifest}
	if got := c.Release(); got != want {
		t.Errorf("Release() = %+v, want %+v", got, want)
	}
	c.Executor.Platform = "linux/amd64"
	want.Platform, want.ManifestDigest = "linux/amd64", ""
	if got := c.Release(); got != want {
		t.Errorf("Release() unpinned = %+v, want %+v", got, want)
	}
}

// TestProgramLists: enabled programs, and of those the autostart ones, by
// priority then name.
func TestProgramLists(t *testing.T) {
	c := Config{Programs: map[string]Program{
		"b":   {Enabled: true, Autostart: true, Priority: 5},
		"a":   {Enabled: true, Autostart: false, Priority: 5},
		"off": {Enabled: false, Autostart: true, Priority: 1},
		"z":   {Enabled: true, Autostart: true, Priority: 1},
	}}
	if got := c.EnabledPrograms(); !slices.Equal(got, []string{"z", "a", "b"}) {
		t.Errorf("EnabledPrograms() = %q", got)
	}
	if got := c.AutostartPrograms(); !slices.Equal(got, []string{"z", "b"}) {
		t.Errorf("AutostartPrograms() = %q", got)
	}
	if got := (&Config{}).AutostartPrograms(); got != nil {
		t.Errorf("AutostartPrograms() of none = %q, want nil", got)
	}
}

// TestWritePinThroughSymlink: a config file that is a symlink (kept in a
// checkout, linked from /etc/hbx/hbx.yaml) gets the pin written to its
// target; the link stays a link. Renaming over the link replaced it with
// a copy, so later edits of the real file were silently ignored.
func TestWritePinThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "repo", "hbx.yaml")
	if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(real, []byte("executor:\n  port: 4000\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "etc", "hbx.yaml")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../repo/hbx.yaml", link); err != nil {
		t.Fatal(err)
	}
	if err := WritePin(link, pinImage, "linux/amd64", pinManifest); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("%s is no longer a symlink after WritePin (%v)", link, err)
	}
	b, err := os.ReadFile(real)
	if err != nil || !strings.Contains(string(b), pinManifest) {
		t.Errorf("the link's target holds %q, %v; want the pin %s", b, err, pinManifest)
	}
}
