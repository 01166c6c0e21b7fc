package installer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/release"
)

// buildTree makes the tree spec describes under root: "d/" a directory,
// "f" a file (its name as content), "l => target" a symlink. Parents are
// made as needed, mode 0755.
func buildTree(t *testing.T, root string, spec []string) {
	t.Helper()
	for _, s := range spec {
		p := filepath.Join(root, strings.TrimSuffix(s, "/"))
		if name, target, ok := strings.Cut(s, " => "); ok {
			p = filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if strings.HasSuffix(s, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// deepSpec is a chain of n directories, a file in each.
func deepSpec(n int) []string {
	var spec []string
	p := ""
	for range n {
		p += "d/"
		spec = append(spec, p+"f")
	}
	return spec
}

// wideSpec is n empty sibling directories under w/.
func wideSpec(n int) []string {
	spec := make([]string, 0, n)
	for i := range n {
		spec = append(spec, fmt.Sprintf("w/%05d/", i))
	}
	return spec
}

// bushySpec is a full tree of fan subdirectories per directory, depth
// levels deep, a file in each: every walker hands off, then waits on
// children that hand off in turn, so every slot is busy while parents wait.
func bushySpec(fan, depth int) []string {
	var spec []string
	var grow func(p string, d int)
	grow = func(p string, d int) {
		spec = append(spec, p+"f")
		if d == depth {
			return
		}
		for i := range fan {
			grow(fmt.Sprintf("%s%d/", p, i), d+1)
		}
	}
	grow("b/", 0)
	return spec
}

// combSpec is n chains of depth directories each under c/.
func combSpec(n, depth int) []string {
	var spec []string
	for i := range n {
		p := fmt.Sprintf("c/%03d/", i)
		for range depth {
			p += "x/"
			spec = append(spec, p+"f")
		}
	}
	return spec
}

// linkTreeWithin runs linkTree and fails the test, with every
// goroutine's stack, when it has not returned within limit: a deadlock
// shows as a failure, not as the package's timeout.
func linkTreeWithin(t *testing.T, limit time.Duration, src, dst string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- linkTree(src, dst, nil) }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("linkTree(%s) still running after %s: deadlocked?\n%s", src, limit, buf)
		return nil
	}
}

// TestLinkTreeEveryShapeFinishes: trees shaped to starve the slots (a
// chain 700 deep, 10k siblings, a full tree where every walker waits on
// walkers that wait in turn, many deep chains side by side) are linked
// whole on 1, 2 and 8 CPUs, without a deadlock or a walker left behind,
// the copy equal to the source and sharing its inodes.
func TestLinkTreeEveryShapeFinishes(t *testing.T) {
	shapes := []struct {
		name string
		spec []string
	}{
		{"deep 700", deepSpec(700)},
		{"wide 10000", wideSpec(10000)},
		{"bushy 4^5", bushySpec(4, 5)},
		{"comb 32x40", combSpec(32, 40)},
	}
	for _, sh := range shapes {
		src := t.TempDir()
		buildTree(t, src, sh.spec)
		want := treeState(t, src, true)
		for _, procs := range []int{1, 2, 8} {
			t.Run(fmt.Sprintf("%s, %d CPUs", sh.name, procs), func(t *testing.T) {
				withProcs(t, procs)
				dst := t.TempDir()
				before := runtime.NumGoroutine()
				if err := linkTreeWithin(t, time.Minute, src, dst); err != nil {
					t.Fatalf("linkTree = %v", err)
				}
				checkNoWalkerLeft(t, before)
				checkLinkedCopy(t, dst, want)
			})
		}
	}
}

// TestLinkTreeErrorStopsEveryWalker: an error on the calling goroutine's
// own part of the walk (a name taken in dst, met right after a large
// subdirectory was handed off) stops the walkers already started: they
// start no further subdirectory, so the handed-off subtree is left
// mostly unlinked rather than linked whole before the error is returned.
func TestLinkTreeErrorStopsEveryWalker(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	buildTree(t, src, append(wideSpec(3000), "x"))
	if err := os.WriteFile(filepath.Join(dst, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	withProcs(t, 2)
	before := runtime.NumGoroutine()
	err := linkTreeWithin(t, time.Minute, src, dst)
	if !errors.Is(err, unix.EEXIST) || !strings.Contains(err.Error(), `link "x"`) {
		t.Fatalf("linkTree = %v, want EEXIST naming x", err)
	}
	checkNoWalkerLeft(t, before)
	ents, _ := os.ReadDir(filepath.Join(dst, "w"))
	if len(ents) > 1000 {
		t.Errorf("%d of w's 3000 subdirectories linked after the walk failed on x; want the walk to stop", len(ents))
	}
}

// linkTreeChildEnv, when set ("src:dst"), makes
// TestLinkTreeOutOfDescriptors the re-executed child: it lowers its
// RLIMIT_NOFILE to 64, links src into dst, removes dst as keepState does
// after a failure, and prints what happened.
const linkTreeChildEnv = "HBXTEST_LINKTREE_NOFILE"

// TestLinkTreeOutOfDescriptors: with 64 descriptors (RLIMIT_NOFILE, soft
// and hard, in a re-executed child) a tree 300 directories deep cannot
// be walked holding two handles a level; on 1, 2 and 8 CPUs the walk
// returns one EMFILE error naming the entry it stopped at, never hangs,
// and what it linked can be removed under the same limit (keepState's
// clean-up), leaving nothing a later install would start from.
func TestLinkTreeOutOfDescriptors(t *testing.T) {
	if v := os.Getenv(linkTreeChildEnv); v != "" {
		src, dst, _ := strings.Cut(v, ":")
		lim := unix.Rlimit{Cur: 64, Max: 64}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			fmt.Println("setrlimit:", err)
			return
		}
		err := linkTree(src, dst, nil)
		fmt.Printf("linkTree: %v\nEMFILE: %v\n", err, errors.Is(err, unix.EMFILE))
		fmt.Printf("remove: %v\n", os.RemoveAll(dst))
		return
	}
	src := t.TempDir()
	buildTree(t, src, append(deepSpec(300), wideSpec(200)...))
	for _, procs := range []int{1, 2, 8} {
		t.Run(fmt.Sprintf("%d CPUs", procs), func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "rootfs")
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestLinkTreeOutOfDescriptors$", "-test.count=1")
			cmd.Env = append(os.Environ(), linkTreeChildEnv+"="+src+":"+dst, "GOMAXPROCS="+strconv.Itoa(procs))
			cmd.WaitDelay = time.Second
			timer := time.AfterFunc(time.Minute, func() { cmd.Process.Signal(unix.SIGQUIT) })
			defer timer.Stop()
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v (a hang is killed with SIGQUIT after a minute)\n%s", err, out)
			}
			s := string(out)
			if !strings.Contains(s, "EMFILE: true") || !strings.Contains(s, "too many open files") {
				t.Errorf("child's linkTree did not fail with EMFILE:\n%s", s)
			}
			if n := strings.Count(s, "too many open files"); n != 1 {
				t.Errorf("child's error names EMFILE %d times, want once:\n%s", n, s)
			}
			if !strings.Contains(s, "remove: <nil>") {
				t.Errorf("the partial tree could not be removed under the same limit:\n%s", s)
			}
			if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("partial tree %s left behind: %v", dst, err)
			}
		})
	}
}

// TestLinkTreeOddEntries: what an image's tree can hold besides plain
// files and 0755 directories is copied as it is, on the parallel walk
// and the ordered one: directories of mode 0, 0500, 0100, 1777 and 2755
// (their children linked, the mode set after them), symlinks dangling,
// looping, absolute or pointing at a directory (linked, never followed),
// names with a newline, a tab, a backslash, bytes that are not UTF-8 or
// 255 bytes long.
func TestLinkTreeOddEntries(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to list directories of mode 0 and 0100")
	}
	src := t.TempDir()
	long := strings.Repeat("n", 255)
	buildTree(t, src, []string{
		"m0/f", "m0/sub/f", "m500/f", "m500/sub/f", "m100/f", "m100/sub/f",
		"sticky/f", "setgid/sub/f", "empty/",
		"links/dangling => nowhere", "links/loop => loop", "links/abs => /etc",
		"links/todir => ../m500", "links/up => ../../../..",
		"names/new\nline", "names/tab\there", `names/back\slash`, "names/\xff\xfe", "names/" + long,
		"names/new\ndir/f", "names/-dash", "names/...",
	})
	for p, m := range map[string]os.FileMode{
		"m0/sub": 0, "m0": 0, "m500/sub": 0o500, "m500": 0o500, "m100/sub": 0o100, "m100": 0o100,
		"sticky": 0o777 | os.ModeSticky, "setgid": 0o755 | os.ModeSetgid,
	} {
		if err := os.Chmod(filepath.Join(src, p), m); err != nil {
			t.Fatal(err)
		}
	}
	want := treeState(t, src, true)
	tests := []struct {
		name  string
		procs int
		each  func(string, *unix.Stat_t) error
	}{
		{"parallel, 8 CPUs", 8, nil},
		{"one CPU", 1, nil},
		{"in walk order", 8, func(string, *unix.Stat_t) error { return nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			withProcs(t, tt.procs)
			dst := t.TempDir()
			if err := linkTree(src, dst, tt.each); err != nil {
				t.Fatalf("linkTree = %v", err)
			}
			checkLinkedCopy(t, dst, want)
		})
	}
}

// TestLinkTreeRefusesSpecialFiles: a fifo, a socket or a device, deep in
// a subdirectory another goroutine links, fails the walk with one error
// naming it and its type, on every walk.
func TestLinkTreeRefusesSpecialFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to make device nodes")
	}
	specials := []struct {
		name string
		mode uint32
		dev  int
	}{
		{"fifo", unix.S_IFIFO | 0o644, 0},
		{"socket", unix.S_IFSOCK | 0o644, 0},
		{"chardev", unix.S_IFCHR | 0o644, int(unix.Mkdev(1, 3))},
		{"blockdev", unix.S_IFBLK | 0o644, int(unix.Mkdev(7, 0))},
	}
	for _, sp := range specials {
		src := t.TempDir()
		buildTree(t, src, append(bushySpec(3, 3), "a/f"))
		p := filepath.Join(src, "b", "2", "1", "0", sp.name)
		if err := unix.Mknod(p, sp.mode, sp.dev); err != nil {
			t.Fatal(err)
		}
		for _, procs := range []int{1, 2, 8} {
			t.Run(fmt.Sprintf("%s, %d CPUs", sp.name, procs), func(t *testing.T) {
				withProcs(t, procs)
				before := runtime.NumGoroutine()
				err := linkTreeWithin(t, time.Minute, src, t.TempDir())
				want := fmt.Sprintf(`"b/2/1/0/%s": unexpected file type %#o`, sp.name, sp.mode&unix.S_IFMT)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("linkTree = %v, want an error containing %s", err, want)
				}
				checkNoWalkerLeft(t, before)
			})
		}
	}
}

// TestLinkTreeTooManyLinks: a file already at its file system's link
// limit (ext4: 65000) fails the walk with EMLINK naming the file, so the
// caller can fall back to applying the layers (seedStaging) or drop the
// state (keepState).
func TestLinkTreeTooManyLinks(t *testing.T) {
	src := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(src, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type != unix.EXT4_SUPER_MAGIC {
		testenv.Missing(t, fmt.Sprintf("needs ext4 for its 65000-link limit (TMPDIR's file system is %#x)", fs.Type))
	}
	buildTree(t, src, append(wideSpec(50), "z/busy"))
	side := t.TempDir()
	for i := range 64999 {
		if err := os.Link(filepath.Join(src, "z", "busy"), filepath.Join(side, strconv.Itoa(i))); err != nil {
			t.Fatalf("link %d: %v", i, err)
		}
	}
	for _, procs := range []int{1, 8} {
		t.Run(fmt.Sprintf("%d CPUs", procs), func(t *testing.T) {
			withProcs(t, procs)
			err := linkTreeWithin(t, time.Minute, src, t.TempDir())
			if !errors.Is(err, unix.EMLINK) || !strings.Contains(err.Error(), `link "z/busy"`) {
				t.Fatalf("linkTree = %v, want EMLINK naming z/busy", err)
			}
		})
	}
}

// TestLinkTreeConcurrentCopies: two walks from one source into two
// destinations at once (two states kept side by side) both finish whole.
func TestLinkTreeConcurrentCopies(t *testing.T) {
	withProcs(t, 8)
	src := linkSource(t)
	want := treeState(t, src, false)
	dsts := []string{t.TempDir(), t.TempDir()}
	errs := make(chan error, len(dsts))
	for _, d := range dsts {
		go func() { errs <- linkTree(src, d, nil) }()
	}
	for range dsts {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("linkTree = %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("concurrent linkTree calls still running after a minute")
		}
	}
	for _, d := range dsts {
		if diff := cmp.Diff(treeState(t, d, false), want); diff != "" {
			t.Errorf("%s differs from its source (-got +want):\n%s", d, diff)
		}
	}
}

// TestLayerReuseFallsBackAtTheLinkLimit: a kept layer state holding a
// file at the file system's link limit (ext4: 65000, reached through
// links elsewhere) cannot be linked into the staging (EMLINK); the
// install applies every layer instead, says so once naming the cause,
// and its release equals a cold install's. The state is retired and
// kept again from the fallback's own inodes, so the next install reuses
// layers again instead of failing the same way every time.
func TestLayerReuseFallsBackAtTheLinkLimit(t *testing.T) {
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", layered(tartest.New().File("app/v1", "v1", 0o644).Bytes()))
	if _, err := Install(context.Background(), e.opts(p1)); err != nil {
		t.Fatal(err)
	}
	states, _ := filepath.Glob(filepath.Join(e.runtime, release.LayersDir, "*", release.RootfsDir, "lib", "shared.js"))
	if len(states) != 1 {
		t.Fatalf("kept layer states holding lib/shared.js: %q, want one", states)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(states[0], &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type != unix.EXT4_SUPER_MAGIC {
		testenv.Missing(t, fmt.Sprintf("needs ext4 for its 65000-link limit (TMPDIR's file system is %#x)", fs.Type))
	}
	side := filepath.Join(filepath.Dir(e.runtime), "links")
	if err := os.Mkdir(side, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		err := os.Link(states[0], filepath.Join(side, strconv.Itoa(i)))
		if errors.Is(err, unix.EMLINK) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	p2 := e.reg.publish(t, "executor", layered(tartest.New().File("app/v2", "v2", 0o644).Bytes()))
	if res := installFallingBack(t, e, p2, "too many links"); res.Reused != 0 {
		t.Errorf("reused %d layers, want none (the state cannot be linked)", res.Reused)
	}
	p3 := e.reg.publish(t, "executor", layered(tartest.New().File("app/v3", "v3", 0o644).Bytes()))
	res, err := Install(context.Background(), e.opts(p3, func(o *Options) { o.StageOnly = true }))
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused == 0 {
		t.Errorf("the install after the fallback reused no layers: the state at the link limit was not retired and kept anew")
	}
	verifyRelease(t, res.Release)
}

// linkTreeKillEnv, when set ("src:dst"), makes
// TestKilledLinkIsNeitherTrustedNorLeft the re-executed child: it links
// src into dst and then waits to be killed.
const linkTreeKillEnv = "HBXTEST_LINKTREE_KILL"

// TestKilledLinkIsNeitherTrustedNorLeft: a process killed with SIGKILL
// while linking a layer state into staging/ (as keepState does) leaves a
// partial tree there; the next install neither starts from it nor keeps
// it: it applies every layer, removes the partial tree and keeps its own
// complete state, which verifies.
func TestKilledLinkIsNeitherTrustedNorLeft(t *testing.T) {
	if v := os.Getenv(linkTreeKillEnv); v != "" {
		src, dst, _ := strings.Cut(v, ":")
		fmt.Println("linkTree:", linkTree(src, dst, nil))
		time.Sleep(time.Hour)
		return
	}
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", layered(tartest.New().File("app/v1", "v1", 0o644).Bytes()))
	if _, err := Install(context.Background(), e.opts(p1)); err != nil {
		t.Fatal(err)
	}
	kept, _ := filepath.Glob(filepath.Join(e.runtime, release.LayersDir, "*"))
	if len(kept) != 1 {
		t.Fatalf("kept layer states: %q, want one", kept)
	}
	if err := os.RemoveAll(filepath.Join(e.runtime, release.LayersDir)); err != nil { // never finished
		t.Fatal(err)
	}
	src := t.TempDir()
	buildTree(t, src, append(bushySpec(4, 5), wideSpec(3000)...))
	partial := filepath.Join(e.runtime, release.StagingDir, "layers-"+filepath.Base(kept[0])+"-000000000000")
	dst := filepath.Join(partial, release.RootfsDir)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledLinkIsNeitherTrustedNorLeft$", "-test.count=1")
	cmd.Env = append(os.Environ(), linkTreeKillEnv+"="+src+":"+dst, "GOMAXPROCS=8")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if ents, _ := os.ReadDir(dst); len(ents) > 0 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the child linked nothing in 30s")
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	p2 := e.reg.publish(t, "executor", layered(tartest.New().File("app/v2", "v2", 0o644).Bytes()))
	res, err := Install(context.Background(), e.opts(p2))
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused != 0 {
		t.Errorf("reused %d layers after the killed link, want none", res.Reused)
	}
	if _, err := os.Lstat(partial); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed link's partial tree %s is left: %v", partial, err)
	}
	state := &release.Installed{Dir: kept[0]}
	l, err := state.OpenFiles()
	if err != nil {
		t.Fatalf("the next install kept no state of its own: %v", err)
	}
	defer l.Close()
	if why, err := release.Verify(state.Rootfs(), l); err != nil || why != "" {
		t.Errorf("verify the next install's state = %q, %v; want it to pass", why, err)
	}
	if _, err := os.Lstat(filepath.Join(state.Rootfs(), "w")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the next install's state holds the killed link's tree: %v", err)
	}
}
