package installer

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/release"
)

// TestValidateShebangAsKernel is a differential test: each entry script
// is validated, then run natively as the payload would run (its PATH the
// image's rootfs dirs then the host's), and validation must pass exactly
// when the run reaches the program the script names. The kernel passes
// everything after a #! interpreter as one argument, so
// "#!/usr/bin/env tool --flag" makes env look for "tool --flag".
func TestValidateShebangAsKernel(t *testing.T) {
	if _, err := exec.LookPath("env"); err != nil {
		testenv.Missing(t, "env(1) is not installed (apt-get install coreutils)")
	}
	host := mustPlatform(t, "linux/"+runtime.GOARCH)
	tool := rootFile{"usr/local/bin/tool", "#!/bin/sh\necho ran-tool\n", 0o755}
	// Symlinks of the image on its PATH: one that stays in the image, one
	// the native run resolves on the host (to the host's echo: it runs,
	// but it is not the image's tool).
	links := map[string]string{"usr/local/bin/alias": "tool", "usr/local/bin/hosttool": "/bin/echo"}
	for _, line := range []string{
		"#!/usr/bin/env tool",
		"#!/usr/bin/env tool  \t",
		"#!/usr/bin/env\ttool",
		"#! /usr/bin/env tool",
		"#!/usr/bin/env -S tool --flag",
		"#!/usr/bin/env -Stool --flag",
		"#!/usr/bin/env tool --flag",
		"#!/usr/bin/env tool\t--flag",
		"#!/usr/bin/env -i tool",
		"#!/usr/bin/env A=1 tool",
		"#!/usr/bin/env hbxtest-missing",
		"#!/usr/bin/env -S A=1 tool",
		"#!/usr/bin/env -S A=1 hbxtest-missing",
		"#!/usr/bin/env -S -u HOME -i tool",
		"#!/usr/bin/env -S -- tool",
		"#!/usr/bin/env alias",
		"#!/usr/bin/env hosttool",
	} {
		t.Run(line, func(t *testing.T) {
			inst := craftRelease(t, []string{"serve"}, tool, rootFile{"usr/local/bin/serve", line + "\n", 0o755})
			for name, target := range links {
				if err := os.Symlink(target, filepath.Join(inst.Rootfs(), name)); err != nil {
					t.Fatal(err)
				}
			}
			verr := validate(context.Background(), inst, host, Options{})
			prog, err := inst.Program()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, prog.Path)
			cmd.Dir = prog.Dir
			cmd.Env = []string{"PATH=" + strings.Join(append(prog.PathDirs, release.DefaultHostPath), ":")}
			out, rerr := cmd.CombinedOutput()
			ran := rerr == nil && strings.Contains(string(out), "ran-tool")
			if ran != (verr == nil) {
				t.Errorf("validate() = %v, but the native run reached the program: %v (run error %v, output %q)", verr, ran, rerr, out)
			}
		})
	}
}

// TestValidateEnvLoop: "#!/usr/bin/env" with options or assignments but
// no program makes env run the script itself again (the kernel appends its
// path): the payload never starts and spins. Validation refuses it (not
// run here: it would not end).
func TestValidateEnvLoop(t *testing.T) {
	host := mustPlatform(t, "linux/"+runtime.GOARCH)
	for _, line := range []string{"#!/usr/bin/env -i", "#!/usr/bin/env A=1", "#!/usr/bin/env -S -i A=1", "#!/usr/bin/env -S -u HOME"} {
		inst := craftRelease(t, []string{"serve"}, rootFile{"usr/local/bin/serve", line + "\n", 0o755})
		err := validate(context.Background(), inst, host, Options{})
		if !errors.Is(err, ErrUnrunnable) || !strings.Contains(err.Error(), "an endless loop") {
			t.Errorf("validate(%q) = %v; want ErrUnrunnable naming the endless loop", line, err)
		}
	}
}

// TestValidateSearchable: executor.user must be able to reach the entry
// program, not only execute the file: an image directory of mode 0000 on
// its path, or a runtime directory the operator made 0700, fail the
// native run with EACCES (shown here by a real exec as that user), so
// validation refuses them naming the directory.
func TestValidateSearchable(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to run as another user")
	}
	host := mustPlatform(t, "linux/"+runtime.GOARCH)
	cred := &syscall.Credential{Uid: 65534, Gid: 65534}
	for _, c := range []struct {
		name    string
		lock    func(inst *release.Installed) string // makes a directory unsearchable, returns its name as errors give it
		wantErr bool
	}{
		{"all searchable", func(inst *release.Installed) string { return "" }, false},
		{"image directory 0000", func(inst *release.Installed) string {
			os.Chmod(filepath.Join(inst.Rootfs(), "usr/local"), 0)
			return "directory /usr/local (mode 0000, owner 0) cannot be searched for uid 65534"
		}, true},
		{"release directory 0700", func(inst *release.Installed) string {
			os.Chmod(inst.Dir, 0o700)
			return "directory " + inst.Dir + " (mode 0700, owner 0) cannot be searched for uid 65534"
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			inst := craftRelease(t, []string{"serve"}, rootFile{"usr/local/bin/serve", "#!/bin/sh\necho ran\n", 0o755})
			for d := inst.Dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			prog, err := inst.Program()
			if err != nil {
				t.Fatal(err)
			}
			want := c.lock(inst)
			cmd := exec.Command(prog.Path)
			cmd.Dir = "/"
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			out, rerr := cmd.CombinedOutput()
			if ran := rerr == nil && strings.Contains(string(out), "ran"); ran == c.wantErr {
				t.Fatalf("native run as uid 65534: ran %v (%v, %q), want %v", ran, rerr, out, !c.wantErr)
			}
			err = validate(context.Background(), inst, host, Options{RunAs: cred})
			if !c.wantErr {
				if err != nil {
					t.Fatalf("validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrUnrunnable) || !strings.Contains(err.Error(), want) {
				t.Fatalf("validate() = %v, want ErrUnrunnable containing %q", err, want)
			}
		})
	}
}

// TestInstallUnderUmask077: root's umask is 077 on hardened hosts. The
// directories hbx creates for a release must still let executor.user
// reach its files (each one created 0755 means 0755, whatever the umask),
// and an install with RunAs must succeed: a 0700 release directory made
// every exec of the payload fail with EACCES.
func TestInstallUnderUmask077(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to validate for another user")
	}
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	e := newEnv(t)
	// The test's temporary directories are 0700: open them as an operator's
	// /var/lib would be.
	for d := filepath.Dir(e.runtime); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := e.reg.publish(t, "executor", goodParts(hostPlat))
	res, err := Install(context.Background(), e.opts(p, func(o *Options) { o.RunAs = &syscall.Credential{Uid: 65534, Gid: 65534} }))
	if err != nil {
		t.Fatalf("Install() under umask 077 = %v", err)
	}
	for _, d := range []string{e.runtime, filepath.Join(e.runtime, release.ReleasesDir), res.Release.Dir, res.Release.Rootfs()} {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o005 != 0o005 {
			t.Errorf("%s: mode %04o, want others to read and search it", d, st.Mode&0o7777)
		}
	}
	// Every entry has the mode files.json records (RuntimeMode of the
	// image's), not one the umask narrowed.
	if res, err := Install(context.Background(), e.opts(p, func(o *Options) { o.Verify = true })); err != nil || res.Changed {
		t.Errorf("Install(--verify) under umask 077 = %+v, %v; want unchanged", res, err)
	}
}

// craftELFOrder is craftELF (no loader) in byte order bo, with the ELF
// data byte saying so.
func craftELFOrder(machine elf.Machine, bo binary.ByteOrder, data elf.Data) []byte {
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Entry: 0x400000, Ehsize: 64, Phentsize: 56, Shentsize: 64,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h.Ident[elf.EI_DATA] = byte(data)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var b bytes.Buffer
	binary.Write(&b, bo, h)
	return b.Bytes()
}

// TestValidateELFByteOrder: ppc64 and ppc64le share one ELF machine
// number; a big-endian program on a little-endian platform (and the
// reverse) is refused as the kernel would refuse to exec it.
func TestValidateELFByteOrder(t *testing.T) {
	be := string(craftELFOrder(elf.EM_PPC64, binary.BigEndian, elf.ELFDATA2MSB))
	le := string(craftELFOrder(elf.EM_PPC64, binary.LittleEndian, elf.ELFDATA2LSB))
	for _, c := range []struct {
		arch, file string
		ok         bool
	}{
		{"ppc64le", le, true}, {"ppc64", be, true}, {"ppc64le", be, false}, {"ppc64", le, false},
	} {
		inst := craftRelease(t, []string{"bun"}, rootFile{"usr/local/bin/bun", c.file, 0o755})
		err := validate(context.Background(), inst, Platform{OS: "linux", Architecture: c.arch}, Options{})
		if (err == nil) != c.ok {
			t.Errorf("validate(%s, %s ELF) = %v, want ok %v", c.arch, map[bool]string{true: "matching", false: "other byte order"}[c.ok], err, c.ok)
		}
	}
}
