package release

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/internal/tartest"
)

// fakeRelease applies layer to dir/rootfs and returns the release with cfg.
func fakeRelease(t *testing.T, layer []byte, cfg ImageConfig) *Installed {
	t.Helper()
	dir := t.TempDir()
	rootfs := filepath.Join(dir, RootfsDir)
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := extract.New(rootfs, extract.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Apply(bytes.NewReader(layer)); err != nil {
		t.Fatal(err)
	}
	return &Installed{Dir: dir, Meta: Meta{Format: MetaFormat, Config: cfg}}
}

func TestProgram(t *testing.T) {
	layer := tartest.New().
		Dir("usr/local/bin", 0o755).File("usr/local/bin/bun", "#!/bin/sh\n", 0o755).
		Symlink("usr/local/bin/bunx", "bun").
		Symlink("usr/local/bin/node", "/usr/local/bin/bun").
		Symlink("usr/local/bin/escape", "/bin/sh"). // the host has /bin/sh; the image does not
		File("usr/local/bin/data", "not a program", 0o644).
		Dir("app/apps/host-selfhost/src", 0o755).File("app/apps/host-selfhost/src/serve.ts", "", 0o644).
		File("app/run.sh", "#!/bin/sh\n", 0o755).
		Dir("var", 0o755).Symlink("var/app", "/app").
		Bytes()
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/bin:/bin", "NODE_ENV=production"}
	cases := []struct {
		name     string
		cfg      ImageConfig
		wantPath string // relative to rootfs
		wantDir  string
		wantErr  string
	}{
		{"pinned image shape", ImageConfig{Cmd: []string{"bun", "run", "src/serve.ts"}, Env: env, WorkingDir: "/app/apps/host-selfhost"}, "usr/local/bin/bun", "app/apps/host-selfhost", ""},
		{"relative symlink on PATH", ImageConfig{Cmd: []string{"bunx"}, Env: env, WorkingDir: "/"}, "usr/local/bin/bun", "", ""},
		{"absolute symlink resolves in rootfs", ImageConfig{Entrypoint: []string{"/usr/local/bin/node"}, Env: env}, "usr/local/bin/bun", "", ""},
		{"working dir through absolute symlink", ImageConfig{Cmd: []string{"./run.sh"}, Env: env, WorkingDir: "/var/app"}, "app/run.sh", "app", ""},
		{"no PATH in env uses the default", ImageConfig{Cmd: []string{"bun"}}, "usr/local/bin/bun", "", ""},
		{"absolute symlink to a host-only file", ImageConfig{Cmd: []string{"escape"}, Env: env}, "", "", `program "escape"`},
		{"missing program", ImageConfig{Cmd: []string{"node22"}, Env: env}, "", "", `program "node22": not found on the image's PATH`},
		{"not executable", ImageConfig{Cmd: []string{"data"}, Env: env}, "", "", "is not an executable file"},
		{"working dir missing", ImageConfig{Cmd: []string{"bun"}, Env: env, WorkingDir: "/nope"}, "", "", `working directory "/nope"`},
		{"working dir is a file", ImageConfig{Cmd: []string{"bun"}, Env: env, WorkingDir: "/app/run.sh"}, "", "", "is not a directory"},
		{"no command", ImageConfig{Env: env}, "", "", "no Entrypoint or Cmd"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inst := fakeRelease(t, layer, c.cfg)
			real, err := filepath.EvalSymlinks(inst.Rootfs())
			if err != nil {
				t.Fatal(err)
			}
			p, err := inst.Program()
			if c.wantErr != "" {
				if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Program() = %v, want ErrCorrupt containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Program() = %v", err)
			}
			if want := filepath.Join(real, c.wantPath); p.Path != want {
				t.Errorf("Path = %s, want %s", p.Path, want)
			}
			if want := filepath.Join(real, c.wantDir); p.Dir != want {
				t.Errorf("Dir = %s, want %s", p.Dir, want)
			}
			if len(p.PathDirs) == 0 || p.PathDirs[0] != filepath.Join(real, "usr/local/bin") {
				t.Errorf("PathDirs = %q, want <rootfs>/usr/local/bin first (missing dirs dropped)", p.PathDirs)
			}
		})
	}
}

func TestScanDiff(t *testing.T) {
	layer := tartest.New().Dir("d", 0o755).File("d/f", "hello", 0o644).Symlink("l", "/d/f").Bytes()
	inst := fakeRelease(t, layer, ImageConfig{})
	files, err := Scan(inst.Rootfs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 || files[1].SHA256 != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" || files[2].Target != "/d/f" {
		t.Fatalf("Scan() = %+v", files)
	}
	if d := Diff(files, files); d != "" {
		t.Errorf("Diff(same) = %q, want none", d)
	}
	if err := os.WriteFile(filepath.Join(inst.Rootfs(), "d/f"), []byte("HELLO"), 0o644); err != nil {
		t.Fatal(err)
	}
	now, _ := Scan(inst.Rootfs(), nil)
	if d := Diff(files, now); !strings.Contains(d, "d/f content differs") {
		t.Errorf("Diff(changed) = %q, want content differs", d)
	}
	os.WriteFile(filepath.Join(inst.Rootfs(), "d/f"), []byte("hello"), 0o644)
	os.Remove(filepath.Join(inst.Rootfs(), "l"))
	now, _ = Scan(inst.Rootfs(), nil)
	if d := Diff(files, now); !strings.Contains(d, "l is missing") {
		t.Errorf("Diff(removed) = %q, want l is missing", d)
	}
}
