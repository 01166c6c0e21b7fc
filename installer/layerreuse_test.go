package installer

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/release"
)

// sharedLayer is a third layer whose files a later top layer changes,
// removes, re-modes, links to and writes over.
func sharedLayer() []byte {
	return tartest.New().
		Dir("lib", 0o755).File("lib/shared.js", "shared v1", 0o644).File("lib/gone.js", "gone", 0o644).
		File("lib/mode.js", "m", 0o644).File("lib/linked", "linked v1", 0o644).
		Dir("lib/opq", 0o755).File("lib/opq/a", "a", 0o644).
		Bytes()
}

// layered is goodParts with sharedLayer and top as its third and fourth
// layers.
func layered(top []byte) imageParts {
	parts := goodParts(hostPlat)
	parts.layers = append(parts.layers, layerSpec{tar: sharedLayer()}, layerSpec{tar: top})
	return parts
}

// entryState is what a tree comparison looks at for one path: type,
// mode, size, mtime, content hash or link target, and (for the
// unchanged-release check) the inode.
type entryState struct {
	Mode   fs.FileMode
	Size   int64
	MTime  time.Time
	SHA256 string
	Target string
	Ino    uint64
}

// treeState describes every entry under rootfs, by root-relative path;
// withIno keeps inode numbers and every mtime (an exact "left untouched"
// check), else inodes are zero and so is a directory's mtime that is not
// the image's (a directory changed after its entry, by a later entry or
// layer, has the time of that change, which differs between any two
// installs): a comparison of two installs. Test images date their
// entries at tartest.Epoch or later, or in 2031.
func treeState(t *testing.T, rootfs string, withIno bool) map[string]entryState {
	t.Helper()
	out := map[string]entryState{}
	err := filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := entryState{Mode: fi.Mode(), MTime: fi.ModTime()}
		if withIno {
			e.Ino = fi.Sys().(*syscall.Stat_t).Ino
		} else if fi.IsDir() && !fi.ModTime().Equal(tartest.Epoch) && fi.ModTime().Year() != 2031 {
			e.MTime = time.Time{}
		}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			e.SHA256, e.Size = hex.EncodeToString(sum[:]), fi.Size()
		case fi.Mode()&fs.ModeSymlink != 0:
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
			e.MTime = time.Time{} // set by the kernel when made by hard link or anew alike
		}
		rel, _ := filepath.Rel(rootfs, p)
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// verifyRelease checks inst's tree against its files.json.
func verifyRelease(t *testing.T, inst *release.Installed) {
	t.Helper()
	l, err := inst.OpenFiles()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if why, err := release.Verify(inst.Rootfs(), l); err != nil || why != "" {
		t.Errorf("verify %s = %q, %v; want it to pass", inst.Dir, why, err)
	}
}

// TestLayerReuseEqualsColdInstall stages, over an active release of four
// layers, an image with the same three base layers and another top
// layer: the staging starts from the kept state of the three (only the
// top layer is fetched and applied), its tree equals a cold install's of
// the same image (paths, types, modes, sizes, mtimes, contents), both
// releases verify, and the active release's every entry keeps its
// inode, mode, mtime and content, whatever the top layer does to the
// files it shares: rewrite, remove, re-mode, re-time, hide under an
// opaque directory, replace by a directory or symlink, or reach through
// a hard link to write into or replace.
func TestLayerReuseEqualsColdInstall(t *testing.T) {
	later := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, tc := range []struct {
		name string
		top  []byte
	}{
		{"new file only", tartest.New().File("app/v2", "v2", 0o644).Bytes()},
		{"rewrites a shared file", tartest.New().File("lib/shared.js", "shared v2", 0o644).Bytes()},
		{"whiteout of a shared file", tartest.New().Whiteout("lib", "gone.js").Bytes()},
		{"opaque directory", tartest.New().Opaque("lib/opq").File("lib/opq/b", "b", 0o644).Bytes()},
		{"chmod of a shared file", tartest.New().File("lib/mode.js", "m", 0o755).Bytes()},
		{"mtime of a shared file", tartest.New().Header(&tar.Header{Typeflag: tar.TypeReg, Name: "lib/mode.js", Mode: 0o644, ModTime: later}, []byte("m")).Bytes()},
		{"mode of a shared directory", tartest.New().Dir("lib", 0o700).Bytes()},
		{"write through a hard link to a shared file", tartest.New().Link("app/alias", "lib/linked").File("app/alias", "written through", 0o644).Bytes()},
		{"hard link, then the shared target replaced", tartest.New().Link("app/alias", "lib/linked").File("lib/linked", "replaced", 0o755).Bytes()},
		{"directory over a shared file", tartest.New().Dir("lib/shared.js", 0o755).File("lib/shared.js/x", "x", 0o644).Bytes()},
		{"symlink over a shared file", tartest.New().Symlink("lib/shared.js", "/etc/passwd").Bytes()},
		{"hard link to a shared file kept", tartest.New().Link("app/alias", "lib/linked").Bytes()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p1 := e.reg.publish(t, "executor", layered(tartest.New().File("app/v1", "v1", 0o644).Bytes()))
			res1, err := Install(context.Background(), e.opts(p1))
			if err != nil {
				t.Fatal(err)
			}
			old := treeState(t, res1.Release.Rootfs(), true)
			p2 := e.reg.publish(t, "executor", layered(tc.top))
			res2, err := Install(context.Background(), e.opts(p2, func(o *Options) { o.StageOnly = true }))
			if err != nil {
				t.Fatal(err)
			}
			if res2.Reused != 3 || res2.Fetched != 1 {
				t.Errorf("staging: reused %d layers, fetched %d; want 3 (the kept state), 1", res2.Reused, res2.Fetched)
			}
			if d := cmp.Diff(treeState(t, res1.Release.Rootfs(), true), old); d != "" {
				t.Errorf("the active release changed under the staging (-after +before):\n%s", d)
			}
			cold := newEnv(t)
			cold.reg = e.reg
			want, err := Install(context.Background(), cold.opts(p2, func(o *Options) { o.ExtractAll = true }))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(treeState(t, res2.Release.Rootfs(), false), treeState(t, want.Release.Rootfs(), false)); d != "" {
				t.Errorf("reusing staging's tree differs from a cold install's (-reused +cold):\n%s", d)
			}
			if d := cmp.Diff(readFiles(t, res2.Release), readFiles(t, want.Release)); d != "" {
				t.Errorf("files.json differs from a cold install's (-reused +cold):\n%s", d)
			}
			verifyRelease(t, res1.Release)
			verifyRelease(t, res2.Release)
			if tc.name == "new file only" {
				assertShared(t, res1.Release.Rootfs(), res2.Release.Rootfs(), "lib/shared.js")
			}
		})
	}
}

// assertShared checks that name is one inode in both trees.
func assertShared(t *testing.T, a, b, name string) {
	t.Helper()
	sa, err := os.Lstat(filepath.Join(a, name))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := os.Lstat(filepath.Join(b, name))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(sa, sb) {
		t.Errorf("%s is not shared between %s and %s", name, a, b)
	}
}

// TestLayerReuseFallsBackWithoutHardLinks: a layer state on another file
// system (a tmpfs mounted over layers/: linkat fails with EXDEV) is not
// started from; every layer is applied, one log line says so, and the
// release equals a cold install's.
func TestLayerReuseFallsBackWithoutHardLinks(t *testing.T) {
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", layered(tartest.New().File("app/v1", "v1", 0o644).Bytes()))
	if _, err := Install(context.Background(), e.opts(p1)); err != nil {
		t.Fatal(err)
	}
	layers := filepath.Join(e.runtime, release.LayersDir)
	aside := layers + ".aside"
	if err := os.Rename(layers, aside); err != nil {
		t.Fatalf("no layer state kept: %v", err)
	}
	mnt := testenv.Tmpfs(t, "64m")
	if err := os.Symlink(mnt, layers); err != nil { // layers/ -> another file system
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", aside+"/.", mnt).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v: %s", err, out)
	}
	p2 := e.reg.publish(t, "executor", layered(tartest.New().File("lib/shared.js", "shared v2", 0o644).Bytes()))
	if res := installFallingBack(t, e, p2, "cross-device"); res.Fetched != 4 {
		t.Errorf("fetched %d layers, want all 4 (none reused)", res.Fetched)
	}
}

// installFallingBack installs p (staged only) into e, where a kept layer
// state cannot be linked, and checks the fallback: the log says once that
// layers were not reused, naming cause (the linkat error's text), and the
// release equals a cold install's of p and verifies. It returns the
// install's result.
func installFallingBack(t *testing.T, e *env, p published, cause string) *Result {
	t.Helper()
	var logs bytes.Buffer
	res, err := Install(context.Background(), e.opts(p, func(o *Options) {
		o.StageOnly, o.Logger = true, slog.New(slog.NewTextHandler(&logs, nil))
	}))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "extracted layers not reused"); n != 1 || !strings.Contains(logs.String(), cause) {
		t.Errorf("log says %d times that layers were not reused (want once, naming %q):\n%s", n, cause, logs.String())
	}
	cold := newEnv(t)
	cold.reg = e.reg
	want, err := Install(context.Background(), cold.opts(p, func(o *Options) { o.ExtractAll = true }))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(treeState(t, res.Release.Rootfs(), false), treeState(t, want.Release.Rootfs(), false)); d != "" {
		t.Errorf("fallback's tree differs from a cold install's (-fallback +cold):\n%s", d)
	}
	verifyRelease(t, res.Release)
	return res
}

// TestDamagedLayerStateIsNotUsed: a layer state whose tree no longer
// matches its files.json (a file gone) is not started from: it is
// removed, every layer is applied, and the release verifies.
func TestDamagedLayerStateIsNotUsed(t *testing.T) {
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", layered(tartest.New().File("app/v1", "v1", 0o644).Bytes()))
	if _, err := Install(context.Background(), e.opts(p1)); err != nil {
		t.Fatal(err)
	}
	states, err := os.ReadDir(filepath.Join(e.runtime, release.LayersDir))
	if err != nil || len(states) != 1 {
		t.Fatalf("layer states after a 4-layer install: %v, %v; want one", states, err)
	}
	state := filepath.Join(e.runtime, release.LayersDir, states[0].Name())
	if err := os.Remove(filepath.Join(state, release.RootfsDir, "lib/gone.js")); err != nil {
		t.Fatal(err)
	}
	p2 := e.reg.publish(t, "executor", layered(tartest.New().File("app/v2", "v2", 0o644).Bytes()))
	res, err := Install(context.Background(), e.opts(p2, func(o *Options) { o.StageOnly = true }))
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != 4 {
		t.Errorf("fetched %d layers, want all 4", res.Fetched)
	}
	if _, err := os.Stat(filepath.Join(res.Release.Rootfs(), "lib/gone.js")); err != nil {
		t.Errorf("the staged release lacks what the damaged state lost: %v", err)
	}
	verifyRelease(t, res.Release)
}

// TestLayerStatesPrunedWithTheirReleases: a layer state stays while a
// kept release (current, previous) starts with its layers, and goes with
// the last such release.
func TestLayerStatesPrunedWithTheirReleases(t *testing.T) {
	e := newEnv(t)
	q := goodParts(hostPlat)
	q.config.Env = append(q.config.Env, "Q=1")
	r := goodParts(hostPlat)
	r.config.Env = append(r.config.Env, "R=1")
	var after [][]string
	for _, parts := range []imageParts{layered(tartest.New().File("app/v1", "v1", 0o644).Bytes()), q, r} {
		if _, err := Install(context.Background(), e.opts(e.reg.publish(t, "executor", parts))); err != nil {
			t.Fatal(err)
		}
		after = append(after, stateNames(t, e.runtime))
	}
	diffIDs := []digest.Digest{digest.FromBytes(baseLayer()), digest.FromBytes(appLayer()), digest.FromBytes(sharedLayer())}
	base, three := release.ChainID(diffIDs[:1]).Encoded(), release.ChainID(diffIDs).Encoded()
	want := [][]string{{three}, sorted(base, three), {base}}
	if d := cmp.Diff(after, want); d != "" {
		t.Errorf("layer states after each install (-got +want):\n%s", d)
	}
}

func stateNames(t *testing.T, runtimeDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(runtimeDir, release.LayersDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

// TestUnlistedLayerStateIsNotPublished: a staged state whose files.json
// cannot be written (its tree gone before listStates walks it) is not
// published under layers/ and its directory is removed; the install
// itself is not failed by it (publishStates only logs).
func TestUnlistedLayerStateIsNotPublished(t *testing.T) {
	runtime := t.TempDir()
	chain := release.ChainID([]digest.Digest{digest.FromString("base")})
	dir := filepath.Join(runtime, release.StagingDir, "layers-"+chain.Encoded()+"-test")
	if err := os.MkdirAll(dir, 0o755); err != nil { // no rootfs/: the listing fails
		t.Fatal(err)
	}
	c := &cold{opts: Options{RuntimeDir: runtime}, log: slog.New(slog.DiscardHandler)}
	c.states = []*stagedState{{dir: dir, chain: chain, layers: 1}}
	c.listStates()
	c.publishStates()
	if c.states[0].err == nil {
		t.Fatal("listStates() of a state without its tree: err = nil, want an error")
	}
	if _, err := os.Lstat(release.LayerStateDir(runtime, chain)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unlisted state published under layers/: Lstat = %v", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unlisted state's staging directory left: Lstat = %v", err)
	}
}

// TestReleaseListedCountsEveryEntry: the "release listed" log line gives
// the number of entries files.json holds, for a cold install (one walk
// of the whole tree) as for one that starts from a kept layer state
// (entries kept from the state's list, the rest looked at).
func TestReleaseListedCountsEveryEntry(t *testing.T) {
	e := newEnv(t)
	listed := func(logs *bytes.Buffer) (entries, kept float64) {
		t.Helper()
		for _, line := range strings.Split(logs.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "release listed" {
				return rec["entries"].(float64), rec["from the layer source"].(float64)
			}
		}
		t.Fatalf("no \"release listed\" line in:\n%s", logs)
		return 0, 0
	}
	for i, top := range []string{"v1", "v2"} {
		var logs bytes.Buffer
		p := e.reg.publish(t, "executor", layered(tartest.New().File("app/"+top, top, 0o644).Bytes()))
		res, err := Install(context.Background(), e.opts(p, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) }))
		if err != nil {
			t.Fatal(err)
		}
		entries, kept := listed(&logs)
		if n := len(readFiles(t, res.Release)); entries != float64(n) {
			t.Errorf("install %d: release listed entries=%v; files.json holds %d", i+1, entries, n)
		}
		if reused := i == 1; reused != (kept > 0) {
			t.Errorf("install %d: release listed %v entries from the layer source; want some only when the state was reused", i+1, kept)
		}
	}
}
