package installer

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/release"
)

// ownedParts is an image whose layers give files to uid 1000, as oven/bun
// gives /home/bun and an image built with USER bun gives /app: owner-only
// modes, a world-writable file, a 1777 tmp/, a hard link.
func ownedParts() imageParts {
	bun := func(h *tar.Header) *tar.Header { h.Uid, h.Gid = 1000, 1000; return h }
	layer := tartest.New().
		Dir("usr", 0o755).Dir("usr/local", 0o755).Dir("usr/local/bin", 0o755).
		File("usr/local/bin/bun", "#!/bin/sh\necho 1.3.14\n", 0o755).
		Header(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}, nil).
		Header(bun(&tar.Header{Typeflag: tar.TypeDir, Name: "app/", Mode: 0o700}), nil).
		Header(bun(&tar.Header{Typeflag: tar.TypeReg, Name: "app/serve.ts", Mode: 0o600, Size: 5}), []byte("serve")).
		Header(bun(&tar.Header{Typeflag: tar.TypeReg, Name: "app/open", Mode: 0o666, Size: 4}), []byte("open")).
		Header(bun(&tar.Header{Typeflag: tar.TypeLink, Name: "app/open2", Linkname: "app/open"}), nil).
		Header(bun(&tar.Header{Typeflag: tar.TypeSymlink, Name: "app/self", Linkname: "serve.ts"}), nil).
		Header(bun(&tar.Header{Typeflag: tar.TypeReg, Name: "app/tool", Mode: 0o4750, Size: 3}), []byte("run")).
		Bytes()
	return imageParts{platform: hostPlat, layers: []layerSpec{{tar: layer}}, config: goodConfig}
}

// assertOwnedByHbx checks every entry of the release directory belongs to
// the user running the test and that no one else may write, and a few
// modes by the rule.
func assertOwnedByHbx(t *testing.T, dir string) {
	t.Helper()
	uid := uint32(os.Geteuid())
	n := 0
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n++
		if st.Uid != uid {
			t.Errorf("%s: owner uid %d, want %d", p, st.Uid, uid)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK && st.Mode&0o022 != 0 {
			t.Errorf("%s: mode %04o lets group or others write", p, st.Mode&0o7777)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(dir, release.RootfsDir)
	for name, want := range map[string]uint32{"app": 0o755, "app/serve.ts": 0o644, "app/open": 0o644, "tmp": 0o1755, "app/tool": 0o755} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(rootfs, name), &st); err != nil {
			t.Fatal(err)
		}
		if got := st.Mode & 0o7777; got != want {
			t.Errorf("%s: mode %04o, want %04o", name, got, want)
		}
	}
	if n < 10 {
		t.Errorf("walked %d entries, want the whole release", n)
	}
}

// TestInstallOwnership: a cold install applies no image owner; every entry
// of the release is the installing user's, modes per extract.RuntimeMode,
// and the release is marked.
func TestInstallOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root: image owners are only applied (the old bug) by root")
	}
	e := newEnv(t)
	p := e.reg.publish(t, "executor", ownedParts())
	res, err := Install(context.Background(), e.opts(p))
	if err != nil {
		t.Fatalf("Install() = %v", err)
	}
	assertOwnedByHbx(t, res.Release.Dir)
	if res.Release.Meta.Ownership != release.OwnedByHbx {
		t.Errorf("release.json ownership = %d, want %d", res.Release.Meta.Ownership, release.OwnedByHbx)
	}
	for _, d := range []string{e.runtime, filepath.Join(e.runtime, release.ReleasesDir)} {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != uint32(os.Geteuid()) || st.Mode&0o022 != 0 {
			t.Errorf("%s: uid %d mode %04o, want the installing user's without group or other write", d, st.Uid, st.Mode&0o7777)
		}
	}
	if res, err := Install(context.Background(), e.opts(p, func(o *Options) { o.Verify = true })); err != nil || res.Changed {
		t.Errorf("Install(--verify) = %+v, %v; want unchanged", res, err)
	}
}

// makeOld turns a release into what an earlier hbx left: the image's
// owners (uid 1000 on app/), the image's modes, files.json recording them,
// no ownership mark. It also leaves the runtime directory world-writable.
func makeOld(t *testing.T, runtimeDir string, inst *release.Installed) {
	t.Helper()
	rootfs := inst.Rootfs()
	old := map[string]uint32{"app": 0o700, "app/serve.ts": 0o600, "app/open": 0o666, "app/tool": 0o750, "tmp": 0o1777}
	for name, m := range old {
		p := filepath.Join(rootfs, name)
		if name != "tmp" {
			if err := os.Lchown(p, 1000, 1000); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(filepath.Join(rootfs, "app/self"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	files, err := inst.ReadFiles()
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		if m, ok := old[f.Path]; ok {
			files[i].Mode = m
		}
	}
	b, _ := json.Marshal(files)
	if err := os.WriteFile(filepath.Join(inst.Dir, release.FilesFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	meta := inst.Meta
	meta.Ownership = 0
	b, _ = json.Marshal(meta)
	if strings.Contains(string(b), "ownership") {
		t.Fatalf("release.json of an old release still says ownership: %s", b)
	}
	if err := os.WriteFile(filepath.Join(inst.Dir, release.MetaFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(runtimeDir, 0o777); err != nil {
		t.Fatal(err)
	}
}

// TestInstallFixesOldRelease: a release installed with the old layout is
// fixed in place by the next install, with no request to the registry;
// --verify then agrees; a marked release is not walked again.
func TestInstallFixesOldRelease(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to chown files to uid 1000")
	}
	e := newEnv(t)
	p := e.reg.publish(t, "executor", ownedParts())
	ctx := context.Background()
	res, err := Install(ctx, e.opts(p))
	if err != nil {
		t.Fatalf("Install() = %v", err)
	}
	makeOld(t, e.runtime, res.Release)
	before := e.reg.requestCount()
	res, err = Install(ctx, e.opts(p))
	if err != nil || res.Changed {
		t.Fatalf("Install() on an old release = %+v, %v; want it fixed in place, unchanged", res, err)
	}
	if n := e.reg.requestCount() - before; n != 0 {
		t.Errorf("fixing an old release made %d registry requests, want 0", n)
	}
	assertOwnedByHbx(t, res.Release.Dir)
	inst, err := release.Current(e.runtime)
	if err != nil || inst.Meta.Ownership != release.OwnedByHbx {
		t.Fatalf("release.json after the fix: %+v, %v; want ownership %d", inst, err, release.OwnedByHbx)
	}
	var st unix.Stat_t
	if err := unix.Stat(e.runtime, &st); err != nil || st.Mode&0o022 != 0 {
		t.Errorf("runtime directory mode %04o, %v; want no group or other write", st.Mode&0o7777, err)
	}
	// files.json was rewritten with the fixed modes: --verify agrees.
	res, err = Install(ctx, e.opts(p, func(o *Options) { o.Verify = true }))
	if err != nil || res.Changed {
		t.Fatalf("Install(--verify) after the fix = %+v, %v; want unchanged", res, err)
	}
	if n := e.reg.requestCount() - before; n != 0 {
		t.Errorf("verify after the fix made %d registry requests, want 0", n)
	}
	// Marked: the warm path walks nothing (a file made 1000's again is
	// not fixed; only --verify finds it, and replaces the release).
	serve := filepath.Join(inst.Rootfs(), "app/serve.ts")
	if err := os.Lchown(serve, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if res, err := Install(ctx, e.opts(p)); err != nil || res.Changed {
		t.Fatalf("warm Install() = %+v, %v; want unchanged", res, err)
	}
	if err := unix.Lstat(serve, &st); err != nil || st.Uid != 1000 {
		t.Errorf("warm install on a marked release touched app/serve.ts (uid %d, %v); want no walk", st.Uid, err)
	}
	res, err = Install(ctx, e.opts(p, func(o *Options) { o.Verify = true }))
	if err != nil || !res.Changed || !strings.Contains(res.Reason, "app/serve.ts is owned by uid 1000") {
		t.Fatalf("Install(--verify) with a file of uid 1000 = %+v, %v; want a reinstall naming it", res, err)
	}
	assertOwnedByHbx(t, res.Release.Dir)
}

// TestFixOldReleaseRefusesOutsideLink: a file of the old release with a
// hard link outside it is not widened (that would expose the outside
// file); the release is installed again instead.
func TestFixOldReleaseRefusesOutsideLink(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to chown files to uid 1000")
	}
	e := newEnv(t)
	p := e.reg.publish(t, "executor", ownedParts())
	ctx := context.Background()
	res, err := Install(ctx, e.opts(p))
	if err != nil {
		t.Fatalf("Install() = %v", err)
	}
	makeOld(t, e.runtime, res.Release)
	// A secret of someone else's, linked into the old release.
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(secret, filepath.Join(res.Release.Rootfs(), "app/stolen")); err != nil {
		t.Fatal(err)
	}
	res, err = Install(ctx, e.opts(p))
	if err != nil || !res.Changed || !strings.Contains(res.Reason, "hard links") {
		t.Fatalf("Install() = %+v, %v; want a reinstall saying why the fix was refused", res, err)
	}
	if fi, err := os.Stat(secret); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("outside file mode %v, %v; want 0600 untouched", fi.Mode(), err)
	}
	assertOwnedByHbx(t, res.Release.Dir)
}

// TestActivateFixesOldRelease: a rollback target installed by an earlier
// hbx is fixed before it becomes current.
func TestActivateFixesOldRelease(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to chown files to uid 1000")
	}
	e := newEnv(t)
	p := e.reg.publish(t, "executor", ownedParts())
	ctx := context.Background()
	res, err := Install(ctx, e.opts(p))
	if err != nil {
		t.Fatalf("Install() = %v", err)
	}
	makeOld(t, e.runtime, res.Release)
	if err := Activate(ctx, e.runtime, res.Release.Meta.ManifestDigest, 0); err != nil {
		t.Fatalf("Activate() = %v", err)
	}
	assertOwnedByHbx(t, res.Release.Dir)
}

// TestFixOldReleaseFollowsNoSymlink: symlinks planted in an old release
// (to a file and to a directory outside it) are chowned themselves, and
// what they point to is left exactly as it was.
func TestFixOldReleaseFollowsNoSymlink(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to chown files to uid 1000")
	}
	e := newEnv(t)
	p := e.reg.publish(t, "executor", ownedParts())
	ctx := context.Background()
	res, err := Install(ctx, e.opts(p))
	if err != nil {
		t.Fatalf("Install() = %v", err)
	}
	makeOld(t, e.runtime, res.Release)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(secret, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(res.Release.Rootfs(), "app")
	for name, target := range map[string]string{"to-file": secret, "to-dir": outside} {
		if err := os.Symlink(target, filepath.Join(app, name)); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(filepath.Join(app, name), 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Install(ctx, e.opts(p)); err != nil {
		t.Fatalf("Install() = %v", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(secret, &st); err != nil || st.Uid != 1000 || st.Mode&0o7777 != 0o600 {
		t.Errorf("outside file: uid %d mode %04o, %v; want 1000 and 0600 untouched", st.Uid, st.Mode&0o7777, err)
	}
	if err := unix.Stat(outside, &st); err != nil || st.Mode&0o7777 != 0o700 {
		t.Errorf("outside directory: mode %04o, %v; want 0700 untouched", st.Mode&0o7777, err)
	}
	for _, name := range []string{"to-file", "to-dir"} {
		if err := unix.Lstat(filepath.Join(app, name), &st); err != nil || st.Uid != uint32(os.Geteuid()) {
			t.Errorf("symlink %s: uid %d, %v; want the installing user's", name, st.Uid, err)
		}
	}
}

// TestFixOwnership: the entry point for hbx run and the supervisor fixes
// current and previous; on a marked release it takes no lock (it succeeds
// while another process holds it).
func TestFixOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to chown files to uid 1000")
	}
	e := newEnv(t)
	p := e.reg.publish(t, "executor", ownedParts())
	ctx := context.Background()
	res, err := Install(ctx, e.opts(p))
	if err != nil {
		t.Fatalf("Install() = %v", err)
	}
	makeOld(t, e.runtime, res.Release)
	before := e.reg.requestCount()
	if err := FixOwnership(ctx, e.runtime, 0, nil); err != nil {
		t.Fatalf("FixOwnership() = %v", err)
	}
	if n := e.reg.requestCount() - before; n != 0 {
		t.Errorf("FixOwnership made %d registry requests, want 0", n)
	}
	assertOwnedByHbx(t, res.Release.Dir)
	lk, err := lock.Acquire(ctx, filepath.Join(e.runtime, release.LockFile), "test", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock()
	if err := FixOwnership(ctx, e.runtime, 0, nil); err != nil {
		t.Errorf("FixOwnership() on a marked release beside a lock holder = %v, want nil (no lock taken)", err)
	}
}
