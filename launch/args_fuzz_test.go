package launch

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/release"
)

// FuzzMapArg: whatever the argument, a mapped one lands in the data
// directory, the state directory's root or the rootfs (there, resolved on
// the host too: no symlink of the release leads out of it), and one passed
// verbatim names no absolute path but a stream path. The fixture's rootfs
// holds symlinks out of it (absolute and by ".."), to /run, to the volume
// and a loop.
func FuzzMapArg(f *testing.F) {
	for _, s := range []string{"/run/x.pid", "--pid=/run/x.pid", "/data/db", "/database", "/app/serve.js",
		"/app/etc/passwd", "/app/up/etc", "/app/runlink/x", "/app/datalink/x", "/app/loop", "//run//x/",
		"/dev/null", "--log=/dev/stderr", "-x=/a=/b", "/app/../../../etc", "/tmp/", "/var", "--=/", "/etc/\nINFO forged log line"} {
		f.Add(s)
	}
	rt := installFake(f, "#!/bin/sh\n", cfg)
	inst, err := release.Current(rt)
	if err != nil {
		f.Fatal(err)
	}
	rootfs, err := filepath.EvalSymlinks(inst.Rootfs())
	if err != nil {
		f.Fatal(err)
	}
	for name, target := range map[string]string{"app/etc": "/etc", "app/up": "../../../../../../..", "app/runlink": "/run",
		"app/datalink": "/data", "app/loop": "loop", "app/rel": "../usr/local/bin"} {
		if err := os.Symlink(target, filepath.Join(rootfs, name)); err != nil && !os.IsExist(err) {
			f.Fatal(err)
		}
	}
	data, state := "/D", "/S"
	f.Fuzz(func(t *testing.T, arg string) {
		got, kind, host, err := release.MapArg(inst, arg, data, state)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("release.MapArg(%q) = %q: not one line", arg, err)
			}
			return
		}
		prefix, v := "", arg
		if strings.HasPrefix(arg, "-") {
			if k, val, ok := strings.Cut(arg, "="); ok {
				prefix, v = k+"=", val
			}
		}
		switch kind {
		case release.ArgVerbatim:
			if got != arg {
				t.Fatalf("release.MapArg(%q) = %q, verbatim", arg, got)
			}
			if path.IsAbs(v) && !slices.Contains(release.StreamPaths, path.Clean(v)) {
				t.Fatalf("release.MapArg(%q) passes the host path %q verbatim", arg, v)
			}
			return
		case release.ArgData:
			if !under(host, data) {
				t.Fatalf("release.MapArg(%q) = %q: data path outside %s", arg, host, data)
			}
		case release.ArgState:
			if !under(host, state+"/"+release.StateRoot) {
				t.Fatalf("release.MapArg(%q) = %q: state path outside %s/%s", arg, host, state, release.StateRoot)
			}
		case release.ArgRelease:
			if !under(host, rootfs) {
				t.Fatalf("release.MapArg(%q) = %q: release path outside the rootfs %s", arg, host, rootfs)
			}
			if real, err := filepath.EvalSymlinks(host); err == nil && !under(real, rootfs) {
				t.Fatalf("release.MapArg(%q) = %q, which the host resolves to %s, outside the rootfs", arg, host, real)
			}
		}
		if got != prefix+host || host != filepath.Clean(host) {
			t.Fatalf("release.MapArg(%q) = %q, host %q; want %q", arg, got, host, prefix+host)
		}
	})
}

// under reports whether the clean absolute path p is dir or below it.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
