package launch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/release"
)

// TestMapArg: the rule for absolute path arguments, "/p" and "--flag=/p"
// alike: volume -> data dir, writable dir -> state dir, in the release ->
// rootfs, anything else refused naming the argument.
func TestMapArg(t *testing.T) {
	rt := installFake(t, "#!/bin/sh\n", cfg)
	inst, err := release.Current(rt)
	if err != nil {
		t.Fatal(err)
	}
	rootfs := inst.Rootfs()
	data, state := "/D", "/S"
	cases := []struct {
		arg, want string
		kind      release.ArgKind
		refused   bool
	}{
		{"run", "run", release.ArgVerbatim, false},
		{"--port", "--port", release.ArgVerbatim, false},
		{"--port=4788", "--port=4788", release.ArgVerbatim, false},
		{"--name=a/b", "--name=a/b", release.ArgVerbatim, false},
		{"-x=rel/path", "-x=rel/path", release.ArgVerbatim, false},
		{"/dev/null", "/dev/null", release.ArgVerbatim, false},
		{"--log=/dev/stderr", "--log=/dev/stderr", release.ArgVerbatim, false},
		{"/data", "/D", release.ArgData, false},
		{"/data/", "/D", release.ArgData, false},
		{"/data/db.sqlite", "/D/db.sqlite", release.ArgData, false},
		{"--db=/data/x/../db", "--db=/D/db", release.ArgData, false},
		{"/run/x.pid", "/S/root/run/x.pid", release.ArgState, false},
		{"--pid=/run/x.pid", "--pid=/S/root/run/x.pid", release.ArgState, false},
		{"/tmp", "/S/root/tmp", release.ArgState, false},
		{"/var/run/x.sock", "/S/root/var/run/x.sock", release.ArgState, false},
		{"/var/lib/app/../../../run/a", "/S/root/run/a", release.ArgState, false},
		{"/app/serve.js", filepath.Join(rootfs, "app/serve.js"), release.ArgRelease, false},
		{"--entry=/app/serve.js", "--entry=" + filepath.Join(rootfs, "app/serve.js"), release.ArgRelease, false},
		{"/app/../usr/local/bin/payload", filepath.Join(rootfs, "usr/local/bin/payload"), release.ArgRelease, false},
		{"/runx", "", 0, true},
		{"/etc/passwd", "", 0, true},
		{"--config=/etc/executor.json", "", 0, true},
		{"/home/hermes/.bashrc", "", 0, true},
		{"/datafile", "", 0, true},
		{"/", rootfs, release.ArgRelease, false},
	}
	for _, c := range cases {
		got, kind, _, err := release.MapArg(inst, c.arg, data, state)
		if c.refused {
			if !errors.Is(err, release.ErrArg) || !strings.Contains(err.Error(), `"`+c.arg+`"`) {
				t.Errorf("release.MapArg(%q) = %q, %v; want release.ErrArg naming the argument", c.arg, got, err)
			}
			continue
		}
		if err != nil || got != c.want || kind != c.kind {
			t.Errorf("release.MapArg(%q) = %q, %d, %v; want %q, %d", c.arg, got, kind, err, c.want, c.kind)
		}
	}
}

// TestCheckArgs: the installer's check refuses a release whose command
// names a host path, naming the argument; Prepare refuses it too.
func TestCheckArgs(t *testing.T) {
	good := installFake(t, "#!/bin/sh\n", cfg)
	inst, err := release.Current(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := release.CheckArgs(inst); err != nil {
		t.Errorf("CheckArgs(good) = %v", err)
	}
	bad := cfg
	bad.Cmd = []string{"/app/serve.js", "--config=/etc/executor/config.json"}
	rt := installFake(t, "#!/bin/sh\n", bad)
	inst, err = release.Current(rt)
	if err != nil {
		t.Fatal(err)
	}
	err = release.CheckArgs(inst)
	if !errors.Is(err, release.ErrArg) || !strings.Contains(err.Error(), `"--config=/etc/executor/config.json"`) {
		t.Errorf("CheckArgs(bad) = %v; want release.ErrArg naming the argument", err)
	}
	o := baseOptions(t, rt)
	if _, err := Prepare(o); !errors.Is(err, release.ErrArg) {
		t.Errorf("Prepare(bad) = %v; want release.ErrArg", err)
	}
	if _, err := os.Stat(filepath.Join(o.StateDir, "root")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state root created for a refused release: %v", err)
	}
}

// TestPrepareHandsOverRootData: a data and state directory that are root's
// (a box whose Executor ran as root) have their root-owned entries handed
// over to executor.user once, reported in Spec.HandedOver: files, nested
// directories, a symlink itself (its target outside stays root's); a
// regular file with a second link stays root's (it could be a link to a
// file elsewhere); an entry of another user stays that user's. A second
// Prepare hands over nothing.
func TestPrepareHandsOverRootData(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to chown")
	}
	rt := installFake(t, "#!/bin/sh\n", cfg)
	o := baseOptions(t, rt)
	o.User = "nobody"
	outside := filepath.Join(t.TempDir(), "shadow")
	for _, f := range []string{outside, filepath.Join(o.DataDir, "sub/data.db"), filepath.Join(o.DataDir, "secret.key"), filepath.Join(o.StateDir, "home/.bunrc"), filepath.Join(o.DataDir, "other")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(filepath.Join(o.DataDir, "other"), 1234, 1234); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(o.DataDir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(o.DataDir, "hard")); err != nil {
		t.Fatal(err)
	}
	spec, err := Prepare(o)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]uint32{
		"sub": 65534, "sub/data.db": 65534, "secret.key": 65534, "link": 65534, "other": 1234, "hard": 0,
		"../state/home/.bunrc": 65534,
	} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(o.DataDir, p), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != want {
			t.Errorf("owner of %s = %d, want %d", p, st.Uid, want)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(outside, &st); err != nil || st.Uid != 0 {
		t.Errorf("owner of the symlink's target outside = %d, %v; want root's still", st.Uid, err)
	}
	want := []string{o.DataDir + ": 4 entries root's -> 65534:65534; 1 files with more than one link left root's", o.StateDir + ": "}
	if len(spec.HandedOver) != 2 || spec.HandedOver[0] != want[0] || !strings.HasPrefix(spec.HandedOver[1], want[1]) {
		t.Errorf("HandedOver = %q, want %q", spec.HandedOver, want)
	}
	if spec, err := Prepare(o); err != nil || len(spec.HandedOver) != 0 {
		t.Errorf("second Prepare: HandedOver %q, %v; want none", spec.HandedOver, err)
	}
}

// TestPrepareTightensDirs: an existing data or state directory that is
// 0755 and root's (a Docker named volume) becomes 0700 and executor.user's,
// reported in Spec.Tightened; what is inside keeps its mode, and a file
// root's is handed over (TestPrepareHandsOverRootData).
func TestPrepareTightensDirs(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to chown")
	}
	rt := installFake(t, "#!/bin/sh\n", cfg)
	o := baseOptions(t, rt)
	o.User = "nobody"
	for _, d := range []string{o.DataDir, o.StateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o755)
	}
	inside := filepath.Join(o.DataDir, "kept")
	if err := os.WriteFile(inside, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := Prepare(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{o.DataDir, o.StateDir} {
		st, err := os.Lstat(d)
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if st.Mode().Perm() != 0o700 || sys.Uid != 65534 || sys.Gid != 65534 {
			t.Errorf("%s: mode %04o owner %d:%d; want 0700 65534:65534", d, st.Mode().Perm(), sys.Uid, sys.Gid)
		}
	}
	log := strings.Join(spec.Tightened, "\n")
	if !strings.Contains(log, o.DataDir+": owner 0:0 -> 65534:65534, mode 0755 -> 0700") || !strings.Contains(log, o.StateDir+":") {
		t.Errorf("Tightened = %q; want a line for the data and the state directory", spec.Tightened)
	}
	st, _ := os.Lstat(inside)
	if sys := st.Sys().(*syscall.Stat_t); st.Mode().Perm() != 0o644 || sys.Uid != 65534 {
		t.Errorf("a root file inside the data directory: mode %04o uid %d; want 0644 handed over to 65534", st.Mode().Perm(), sys.Uid)
	}
	// Second time: nothing to tighten, nothing reported.
	spec, err = Prepare(o)
	if err != nil || len(spec.Tightened) != 0 {
		t.Errorf("second Prepare: Tightened %q, %v; want none", spec.Tightened, err)
	}
	// The payload owns the state directory: a symlink it plants there in
	// place of a directory hbx makes private is refused, never followed.
	for _, planted := range []string{"home", "root"} {
		target := t.TempDir()
		os.Chmod(target, 0o755)
		p := filepath.Join(o.StateDir, planted)
		os.RemoveAll(p)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		if _, err := Prepare(o); err == nil || !strings.Contains(err.Error(), p+" is not a directory") {
			t.Errorf("Prepare with %s a symlink = %v; want refused", p, err)
		}
		if st, _ := os.Stat(target); st.Mode().Perm() != 0o755 || st.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("symlink target %s changed: %v", planted, st.Mode())
		}
		os.Remove(p)
	}
	// A symlink in the data directory's place is refused, its target untouched.
	target := t.TempDir()
	os.Chmod(target, 0o755)
	os.RemoveAll(o.DataDir)
	if err := os.Symlink(target, o.DataDir); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(o); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Prepare with a symlinked data dir = %v; want refused", err)
	}
	if st, _ := os.Stat(target); st.Mode().Perm() != 0o755 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("symlink target changed: %v", st.Mode())
	}
}
