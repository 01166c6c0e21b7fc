package launch

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hermesbox/hbx/release"
)

// TestPrepareUnderUmask077: under root's hardened umask 077 the missing
// parents of the data and state directories that Prepare creates are
// still 0755: 0700 parents kept executor.user out of its own 0700 data
// directory.
func TestPrepareUnderUmask077(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	rt := installFake(t, "#!/bin/sh\n", cfg)
	o := baseOptions(t, rt)
	base := t.TempDir()
	o.DataDir = filepath.Join(base, "srv/executor/data")
	o.StateDir = filepath.Join(base, "var/lib/hbx/state")
	if _, err := Prepare(o); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"srv", "srv/executor", "var", "var/lib", "var/lib/hbx"} {
		st, err := os.Stat(filepath.Join(base, d))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != 0o755 {
			t.Errorf("%s: mode %04o, want 0755", d, got)
		}
	}
}

// TestMapArgThroughImageSymlinks: an argument that exists in the release
// only as a symlink of the image into a volume or a writable directory
// (/app/data -> /data, /app/pid -> /run/app.pid) maps as the path it leads
// to: to the data or state directory, not to the rootfs's own read-only,
// empty /data, and it is not refused because /run/app.pid is not in the
// image. Symlinks out of the rootfs stay inside it (chroot semantics).
func TestMapArgThroughImageSymlinks(t *testing.T) {
	rt := installFake(t, "#!/bin/sh\n", cfg)
	inst, err := release.Current(rt)
	if err != nil {
		t.Fatal(err)
	}
	rootfs, err := filepath.EvalSymlinks(inst.Rootfs())
	if err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"app/datalink": "/data", "app/reldata": "../data", "app/pid": "/run/app.pid",
		"app/runlink": "../run", "app/etc": "/etc", "app/js": "serve.js",
	} {
		if err := os.Symlink(target, filepath.Join(rootfs, name)); err != nil {
			t.Fatal(err)
		}
	}
	data, state := "/D", "/S"
	for _, c := range []struct {
		arg, want string
		kind      release.ArgKind
	}{
		{"/app/datalink", "/D", release.ArgData},
		{"/app/datalink/db.sqlite", "/D/db.sqlite", release.ArgData},
		{"--db=/app/reldata/x/db", "--db=/D/x/db", release.ArgData},
		{"/app/pid", "/S/root/run/app.pid", release.ArgState},
		{"--pid=/app/runlink/x.pid", "--pid=/S/root/run/x.pid", release.ArgState},
		{"/app/runlink", "/S/root/run", release.ArgState},
		{"/app/js", filepath.Join(rootfs, "app/serve.js"), release.ArgRelease},
	} {
		got, kind, _, err := release.MapArg(inst, c.arg, data, state)
		if err != nil || got != c.want || kind != c.kind {
			t.Errorf("release.MapArg(%q) = %q, %d, %v; want %q, %d", c.arg, got, kind, err, c.want, c.kind)
		}
	}
	// Out of the rootfs through an absolute symlink: still refused (the
	// image has no /etc/passwd), never the host's.
	if got, _, _, err := release.MapArg(inst, "/app/etc/passwd", data, state); !errors.Is(err, release.ErrArg) {
		t.Errorf("release.MapArg(/app/etc/passwd) = %q, %v; want release.ErrArg", got, err)
	}
	// Prepare creates the state path's directories for a symlinked
	// writable directory too.
	c2 := cfg
	c2.Cmd = []string{"/app/serve.js", "--pid=/app/runlink"}
	rt2 := installFake(t, "#!/bin/sh\n", c2)
	r2, _ := release.Current(rt2)
	if err := os.Symlink("../run", filepath.Join(r2.Rootfs(), "app/runlink")); err != nil {
		t.Fatal(err)
	}
	o := baseOptions(t, rt2)
	if _, err := Prepare(o); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(o.StateDir, release.StateRoot, "run")); err != nil || !st.IsDir() {
		t.Errorf("state root run/ for --pid=/app/runlink: %v", err)
	}
}
