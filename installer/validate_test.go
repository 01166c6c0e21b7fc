package installer

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/release"
)

// craftELF returns a minimal little-endian ELF64 executable header for
// machine, with a PT_INTERP naming loader when loader is not "" (the
// stdlib reads ELF but cannot write it). It is enough for debug/elf and
// for validation; it would not run.
func craftELF(machine elf.Machine, loader string) []byte {
	const ehsize, phsize = 64, 56
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Entry: 0x400000, Ehsize: ehsize, Phentsize: phsize, Shentsize: 64,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var progs []elf.Prog64
	if loader != "" {
		h.Phoff, h.Phnum = ehsize, 1
		n := uint64(len(loader) + 1)
		progs = append(progs, elf.Prog64{Type: uint32(elf.PT_INTERP), Flags: uint32(elf.PF_R), Off: ehsize + phsize, Filesz: n, Memsz: n, Align: 1})
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, h)
	for _, p := range progs {
		binary.Write(&b, binary.LittleEndian, p)
	}
	if loader != "" {
		b.WriteString(loader + "\x00")
	}
	return b.Bytes()
}

// hostLoader is the dynamic loader the host's /bin/sh names, or "" when it
// is static.
func hostLoader(t *testing.T) string {
	t.Helper()
	f, err := elf.Open("/bin/sh")
	if err != nil {
		// Not a missing prerequisite: the host's /bin/sh is what it is.
		t.Skipf("host /bin/sh is not an ELF file: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			p.ReadAt(b, 0)
			return string(bytes.TrimRight(b, "\x00"))
		}
	}
	return ""
}

type rootFile struct {
	path, content string
	mode          os.FileMode
}

// craftRelease writes a release directory with a rootfs holding files
// (image paths) and cmd as its Cmd, /usr/local/bin and /bin on its PATH.
func craftRelease(t *testing.T, cmd []string, files ...rootFile) *release.Installed {
	t.Helper()
	dir := t.TempDir()
	rootfs := filepath.Join(dir, release.RootfsDir)
	for _, d := range []string{"usr/local/bin", "bin", "app"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		p := filepath.Join(rootfs, f.path)
		if err := os.WriteFile(p, []byte(f.content), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	return &release.Installed{Dir: dir, Meta: release.Meta{Config: release.ImageConfig{
		Cmd: cmd, WorkingDir: "/app", Env: []string{"PATH=/usr/local/bin:/bin"},
	}}}
}

func TestValidateStatic(t *testing.T) {
	host := mustPlatform(t, "linux/"+runtime.GOARCH)
	other := otherArch()
	hostELF := string(craftELF(elfMachines[runtime.GOARCH], hostLoader(t)))
	otherELF := string(craftELF(elfMachines[other], ""))
	// A host file that is not executable, as a #! interpreter.
	plain := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		plat    Platform
		cmd     []string
		files   []rootFile
		cred    *syscall.Credential
		wantErr string // "" passes
	}{
		{name: "ELF for the platform, its loader on the host", plat: host, cmd: []string{"bun", "run", "x.ts"},
			files: []rootFile{{"usr/local/bin/bun", hostELF, 0o755}}},
		{name: "static ELF for the platform", plat: host, cmd: []string{"bun"},
			files: []rootFile{{"usr/local/bin/bun", string(craftELF(elfMachines[runtime.GOARCH], "")), 0o755}}},
		{name: "wrapper script that would never finish a --version", plat: host, cmd: []string{"executor-web"},
			files: []rootFile{{"usr/local/bin/executor-web", "#!/bin/sh\nexec sleep 1000\n", 0o755}}},
		{name: "#!/usr/bin/env bun to the rootfs's bun", plat: host, cmd: []string{"serve.js"},
			files: []rootFile{{"usr/local/bin/serve.js", "#!/usr/bin/env bun\n", 0o755}, {"usr/local/bin/bun", hostELF, 0o755}}},
		{name: "host shell of another architecture than the platform", plat: Platform{OS: "linux", Architecture: other},
			cmd: []string{"executor-web"}, files: []rootFile{{"usr/local/bin/executor-web", "#!/bin/sh\n", 0o755}}},

		{name: "ELF for another architecture", plat: host, cmd: []string{"bun"},
			files:   []rootFile{{"usr/local/bin/bun", otherELF, 0o755}},
			wantErr: "program /usr/local/bin/bun is an ELF for " + other + ", the platform is linux/" + runtime.GOARCH},
		{name: "ELF for another architecture behind #!/usr/bin/env", plat: host, cmd: []string{"serve.js"},
			files:   []rootFile{{"usr/local/bin/serve.js", "#!/usr/bin/env bun\n", 0o755}, {"usr/local/bin/bun", otherELF, 0o755}},
			wantErr: "program bun of /usr/local/bin/serve.js: /usr/local/bin/bun is an ELF for " + other},
		{name: "loader missing on the host", plat: Platform{OS: "linux", Architecture: "arm64"}, cmd: []string{"bun"},
			files:   []rootFile{{"usr/local/bin/bun", string(craftELF(elf.EM_AARCH64, "/lib/ld-linux-hbxtest-aarch64.so.1")), 0o755}},
			wantErr: "program /usr/local/bin/bun: /lib/ld-linux-hbxtest-aarch64.so.1 not found: the payload needs glibc on the host"},
		{name: "musl loader missing on the host", plat: host, cmd: []string{"bun"},
			files:   []rootFile{{"usr/local/bin/bun", string(craftELF(elfMachines[runtime.GOARCH], "/lib/ld-musl-hbxtest.so.1")), 0o755}},
			wantErr: "/lib/ld-musl-hbxtest.so.1 not found: the payload needs musl on the host"},
		{name: "interpreter missing", plat: host, cmd: []string{"executor-web"},
			files:   []rootFile{{"usr/local/bin/executor-web", "#!/opt/hbxtest/bin/bash -e\n", 0o755}},
			wantErr: "interpreter of /usr/local/bin/executor-web: /opt/hbxtest/bin/bash not found on the host"},
		{name: "DOS line endings", plat: host, cmd: []string{"executor-web"},
			files:   []rootFile{{"usr/local/bin/executor-web", "#!/bin/sh\r\nexec bun\r\n", 0o755}},
			wantErr: `script /usr/local/bin/executor-web: #! line ends in \r (DOS line endings): the kernel looks for "/bin/sh\r"`},
		{name: "env names a program on no PATH", plat: host, cmd: []string{"serve.js"},
			files:   []rootFile{{"usr/local/bin/serve.js", "#!/usr/bin/env hbxtest-no-such-runtime\n", 0o755}},
			wantErr: "script /usr/local/bin/serve.js: hbxtest-no-such-runtime not found on the payload's PATH"},
		{name: "interpreter not executable", plat: host, cmd: []string{"executor-web"},
			files:   []rootFile{{"usr/local/bin/executor-web", "#!" + plain + "\n", 0o755}},
			wantErr: plain + " is not an executable file"},
		{name: "entry program not executable", plat: host, cmd: []string{"/usr/local/bin/bun"},
			files:   []rootFile{{"usr/local/bin/bun", hostELF, 0o644}},
			wantErr: `program "/usr/local/bin/bun": /usr/local/bin/bun is not an executable file`},
		{name: "entry program not executable by executor.user", plat: host, cmd: []string{"/usr/local/bin/bun"},
			files: []rootFile{{"usr/local/bin/bun", hostELF, 0o700}}, cred: &syscall.Credential{Uid: 4242, Gid: 4242},
			wantErr: "program /usr/local/bin/bun is not an executable file for uid 4242"},
		{name: "neither ELF nor script", plat: host, cmd: []string{"bun"},
			files:   []rootFile{{"usr/local/bin/bun", "MZ\x90\x00 not for linux", 0o755}},
			wantErr: "program /usr/local/bin/bun is neither an ELF executable nor a #! script"},
		{name: "a loop of #!/usr/bin/env scripts", plat: host, cmd: []string{"a"},
			files:   []rootFile{{"usr/local/bin/a", "#!/usr/bin/env b\n", 0o755}, {"usr/local/bin/b", "#!/usr/bin/env a\n", 0o755}},
			wantErr: "more than 8 programs in its chain of interpreters"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if strings.Contains(c.wantErr, "/lib/ld-linux-hbxtest") {
				if _, err := os.Stat("/lib/ld-linux-hbxtest-aarch64.so.1"); err == nil {
					// Not a missing prerequisite: this case needs the loader absent.
					t.Skip("the host has the loader")
				}
			}
			if c.cred != nil && os.Geteuid() != 0 {
				testenv.Missing(t, "needs root for the file owner")
			}
			inst := craftRelease(t, c.cmd, c.files...)
			start := time.Now()
			err := validate(context.Background(), inst, c.plat, Options{RunAs: c.cred})
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("validate took %s: it must not run the program", took)
			}
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrUnrunnable) || errors.Is(err, release.ErrCorrupt) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("validate() = %v\nwant ErrUnrunnable (not ErrCorrupt) containing %q", err, c.wantErr)
			}
		})
	}
}

// TestValidateSmoke: the smoke hook runs after the static checks, and its
// error is the release's refusal as it words it; static refusals skip it.
func TestValidateSmoke(t *testing.T) {
	host := mustPlatform(t, "linux/"+runtime.GOARCH)
	inst := craftRelease(t, []string{"executor-web"}, rootFile{"usr/local/bin/executor-web", "#!/bin/sh\n", 0o755})
	ran := 0
	smokeErr := errors.New("smoke command bun --version exited 3: boom")
	err := validate(context.Background(), inst, host, Options{Smoke: func(ctx context.Context, got *release.Installed) error {
		ran++
		if got != inst {
			t.Errorf("smoke got release %v, want %v", got.Dir, inst.Dir)
		}
		return smokeErr
	}})
	if ran != 1 || !errors.Is(err, smokeErr) || errors.Is(err, release.ErrCorrupt) {
		t.Fatalf("validate() = %v after %d smoke runs, want the smoke error after 1", err, ran)
	}
	bad := craftRelease(t, []string{"bun"}, rootFile{"usr/local/bin/bun", string(craftELF(elfMachines[otherArch()], "")), 0o755})
	ran = 0
	if err := validate(context.Background(), bad, host, Options{Smoke: func(context.Context, *release.Installed) error { ran++; return nil }}); !errors.Is(err, ErrUnrunnable) || ran != 0 {
		t.Fatalf("validate() = %v after %d smoke runs, want ErrUnrunnable and none", err, ran)
	}
}

func mustPlatform(t *testing.T, s string) Platform {
	t.Helper()
	p, err := ParsePlatform(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
