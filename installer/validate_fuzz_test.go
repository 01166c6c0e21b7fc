package installer

import (
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/release"
)

// FuzzCheckLoads: whatever an image's entry program holds (a #! line, an
// ELF header, anything), following it neither panics nor loops, and a
// refusal is one line.
func FuzzCheckLoads(f *testing.F) {
	host := elfMachines[runtime.GOARCH]
	for _, s := range []string{
		"#!/bin/sh\n", "#!/usr/bin/env tool\n", "#!/usr/bin/env -S tool --flag\n", "#!/usr/bin/env tool --flag\n",
		"#!/usr/bin/env serve\n", "#!tool\n", "#!\n", "#! \t\n", "#!/bin/sh\r\n", "#!/usr/bin/env -S\n", "#!/usr/bin/env -i\n",
		string(craftELF(host, "")), string(craftELF(host, "/lib64/ld-linux-x86-64.so.2")), string(craftELF(elf.EM_AARCH64, "rel")),
		string(craftELF(host, strings.Repeat("/x", 3000))), "\x7fELF", "",
	} {
		f.Add([]byte(s))
	}
	tool := rootFile{"usr/local/bin/tool", "#!/bin/sh\necho ran-tool\n", 0o755}
	dir := f.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"usr/local/bin", "app"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootfs, tool.path), []byte(tool.content), tool.mode); err != nil {
		f.Fatal(err)
	}
	entry := filepath.Join(rootfs, "usr/local/bin/serve")
	plat, err := ParsePlatform("linux/" + runtime.GOARCH)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		if err := os.WriteFile(entry, content, 0o755); err != nil {
			t.Fatal(err)
		}
		prog := &release.Program{Path: entry, Args: []string{"serve"}, Dir: filepath.Join(rootfs, "app"),
			PathDirs: []string{filepath.Join(rootfs, "usr/local/bin")}}
		err := checkLoads(rootfs, prog, plat, release.DefaultHostPath, nil)
		if err != nil && strings.ContainsAny(err.Error(), "\n") {
			t.Fatalf("checkLoads() = %q: not one line", err)
		}
	})
}
