package extract

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
)

// sandbox makes <tmp>/root (the extraction root) and <tmp>/outside with a
// file that nothing may touch.
func sandbox(t *testing.T) (root, outside string) {
	t.Helper()
	tmp := t.TempDir()
	root = filepath.Join(tmp, "root")
	outside = filepath.Join(tmp, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, outside
}

func applyLayers(t *testing.T, root string, opts Options, layers ...[]byte) error {
	t.Helper()
	a, err := New(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i, l := range layers {
		if err := a.Apply(bytes.NewReader(l)); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return nil
}

// TestBreakouts is the table of known attacks on layer extractors. Each must
// leave everything outside the root as it was; some must be refused.
func TestBreakouts(t *testing.T) {
	type tc struct {
		name    string
		from    string // where the attack class is documented
		layers  func(outside string) [][]byte
		wantErr error  // nil: must succeed, but stay inside the root
		want    string // a tree line expected inside the root, if any
	}
	abs := func(outside string) string { return outside } // an absolute host path
	cases := []tc{
		{
			name: "dotdot name", from: "CVE-2018-15664 class (zip-slip)",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().File("../outside/secret", "pwned", 0o644).Bytes()}
			},
			wantErr: ErrUnsafePath,
		},
		{
			name: "dotdot inside name", from: "zip-slip",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().File("a/../../outside/x", "pwned", 0o644).Bytes()}
			},
			wantErr: ErrUnsafePath,
		},
		{
			name: "absolute name lands inside", from: "GNU tar strips leading /",
			layers: func(o string) [][]byte { return [][]byte{tartest.New().File(abs(o)+"/x", "in", 0o644).Bytes()} },
			want:   "x 0644 in",
		},
		{
			name: "absolute symlink then write through", from: "CVE-2019-14271, containerd issue 2530",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().Symlink("s", abs(o)).File("s/secret", "pwned", 0o644).Bytes()}
			},
			want: "secret 0644 pwned",
		},
		{
			name: "relative symlink climbing then write through", from: "CVE-2018-15664",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().Symlink("s", "../../../..").File("s/outside/secret", "pwned", 0o644).Bytes()}
			},
			want: "outside/secret 0644 pwned",
		},
		{
			name: "symlink in lower layer, write in upper", from: "CVE-2021-30465 class",
			layers: func(o string) [][]byte {
				return [][]byte{
					tartest.New().Symlink("s", abs(o)).Bytes(),
					tartest.New().File("s/secret", "pwned", 0o644).Bytes(),
				}
			},
			want: "secret 0644 pwned",
		},
		{
			name: "replace symlink leaf pointing outside", from: "O_NOFOLLOW on the last component",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().Symlink("s", abs(o)+"/secret").File("s", "mine", 0o644).Bytes()}
			},
			want: "s 0644 mine",
		},
		{
			name: "hardlink to outside", from: "CVE-2019-10152 class",
			layers:  func(o string) [][]byte { return [][]byte{tartest.New().Link("h", "../outside/secret").Bytes()} },
			wantErr: ErrUnsafePath,
		},
		{
			name: "hardlink through absolute symlink", from: "hardlink via symlinked parent",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().Symlink("s", abs(o)).Link("h", "s/secret").Bytes()}
			},
			wantErr: ErrBadLink,
		},
		{
			name: "hardlink to directory", from: "link(2) refuses, tar should too",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().Dir("d", 0o755).Link("h", "d").Bytes()}
			},
			wantErr: ErrBadLink,
		},
		{
			name: "whiteout through symlink", from: "escaping whiteout",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().Symlink("s", abs(o)).Whiteout("s", "secret").Bytes()}
			},
		},
		{
			name: "whiteout with dotdot", from: "escaping whiteout",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().File("../.wh.secret", "", 0o644).Bytes()}
			},
			wantErr: ErrUnsafePath,
		},
		{
			name: "whiteout of dotdot", from: "malformed whiteout",
			layers:  func(o string) [][]byte { return [][]byte{tartest.New().File("a/.wh..", "", 0o644).Bytes()} },
			wantErr: ErrBadWhiteout,
		},
		{
			name: "opaque whiteout under symlink", from: "containerd issue 2530 class",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().Symlink("s", abs(o)).Opaque("s").Bytes()}
			},
		},
		{
			name: "opaque whiteout under relative symlink", from: "containerd issue 2530 class",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().Symlink("s", "../outside").Opaque("s").Bytes()}
			},
		},
		{
			name: "char device", from: "device nodes give host access",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().Header(&tar.Header{Typeflag: tar.TypeChar, Name: "dev/mem", Devmajor: 1, Devminor: 1, Mode: 0o666}, nil).Bytes()}
			},
			wantErr: ErrUnsupportedType,
		},
		{
			name: "block device", from: "device nodes give host access",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().Header(&tar.Header{Typeflag: tar.TypeBlock, Name: "sda", Devmajor: 8, Mode: 0o666}, nil).Bytes()}
			},
			wantErr: ErrUnsupportedType,
		},
		{
			name: "fifo", from: "a fifo can hang readers",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().Header(&tar.Header{Typeflag: tar.TypeFifo, Name: "p", Mode: 0o666}, nil).Bytes()}
			},
			wantErr: ErrUnsupportedType,
		},
		{
			name: "dot entry that is a symlink", from: "root replaced by a symlink",
			layers:  func(o string) [][]byte { return [][]byte{tartest.New().Symlink(".", abs(o)).Bytes()} },
			wantErr: ErrUnsafePath,
		},
		{
			name: "dot entry that is a file", from: "root replaced by a file",
			layers:  func(o string) [][]byte { return [][]byte{tartest.New().File(".", "x", 0o644).Bytes()} },
			wantErr: ErrUnsafePath,
		},
		{
			name: "dangling absolute symlink parent resolves in root", from: "Debian var/run -> /run",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().Dir("var", 0o755).Symlink("var/run", "/run").File("var/run/app.pid", "1", 0o644).Bytes()}
			},
			want: "run/app.pid 0644 1",
		},
		{
			name: "symlink chain to outside", from: "multi-hop symlink escape",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().Symlink("a", "b").Symlink("b", "../c").Symlink("c", abs(o)).File("a/secret", "pwned", 0o644).Bytes()}
			},
			want: "secret 0644 pwned",
		},
		{
			name: "hardlink target replaced then linked", from: "link to a path redirected by symlink",
			layers: func(o string) [][]byte {
				return [][]byte{tartest.New().File("f", "x", 0o644).Symlink("d", "/").Link("d/g", "f").Bytes()}
			},
			want: "g 0644 x",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root, outside := sandbox(t)
			before := tartest.Tree(t, outside)
			err := applyLayers(t, root, Options{MaxBytes: 1 << 20}, c.layers(outside)...)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("Apply() = %v, want %v (%s)", err, c.wantErr, c.from)
				}
			} else if err != nil {
				t.Fatalf("Apply() = %v, want success (%s)", err, c.from)
			}
			if diff := cmp.Diff(before, tartest.Tree(t, outside)); diff != "" {
				t.Errorf("outside of the root changed (-before +after) (%s):\n%s", c.from, diff)
			}
			if c.want != "" {
				got := tartest.Tree(t, root)
				found := false
				for _, l := range got {
					if l == c.want || strings.HasSuffix(l, "/"+c.want) {
						found = true
					}
				}
				if !found {
					t.Errorf("root tree = %q, want a line %q", got, c.want)
				}
			}
		})
	}
}

func TestWhiteouts(t *testing.T) {
	base := tartest.New().
		Dir("a", 0o755).File("a/x", "x1", 0o644).File("a/y", "y1", 0o644).
		Dir("d", 0o755).File("d/1", "1", 0o644).Dir("d/sub", 0o755).File("d/sub/2", "2", 0o644).
		Dir("gone", 0o755).File("gone/deep", "z", 0o644).
		Bytes()
	cases := []struct {
		name  string
		upper []byte
		want  []string
	}{
		{
			name:  "whiteout file, opaque dir, whiteout dir",
			upper: tartest.New().Whiteout("a", "x").Opaque("d").File("d/new", "n", 0o644).Whiteout("", "gone").Bytes(),
			want:  []string{"a/ 0755", "a/y 0644 y1", "d/ 0755", "d/new 0644 n"},
		},
		{
			name:  "whiteout after an entry of its own layer keeps the entry",
			upper: tartest.New().File("a/x", "x2", 0o644).Whiteout("a", "x").Bytes(),
			want:  []string{"a/ 0755", "a/x 0644 x2", "a/y 0644 y1", "d/ 0755", "d/1 0644 1", "d/sub/ 0755", "d/sub/2 0644 2", "gone/ 0755", "gone/deep 0644 z"},
		},
		{
			name:  "opaque after entries of its own layer keeps them",
			upper: tartest.New().File("d/new", "n", 0o644).File("d/sub/3", "3", 0o644).Opaque("d").Bytes(),
			want:  []string{"a/ 0755", "a/x 0644 x1", "a/y 0644 y1", "d/ 0755", "d/new 0644 n", "d/sub/ 0755", "d/sub/3 0644 3", "gone/ 0755", "gone/deep 0644 z"},
		},
		{
			name:  "whiteout of a directory this layer writes into hides only lower content",
			upper: tartest.New().File("gone/fresh", "f", 0o644).Whiteout("", "gone").Bytes(),
			want:  []string{"a/ 0755", "a/x 0644 x1", "a/y 0644 y1", "d/ 0755", "d/1 0644 1", "d/sub/ 0755", "d/sub/2 0644 2", "gone/ 0755", "gone/fresh 0644 f"},
		},
		{
			name:  "whiteout of something absent is a no-op",
			upper: tartest.New().Whiteout("nope", "x").Whiteout("a", "nope").Bytes(),
			want:  []string{"a/ 0755", "a/x 0644 x1", "a/y 0644 y1", "d/ 0755", "d/1 0644 1", "d/sub/ 0755", "d/sub/2 0644 2", "gone/ 0755", "gone/deep 0644 z"},
		},
		{
			name:  "file replaces directory and directory replaces file",
			upper: tartest.New().File("d", "now a file", 0o600).Dir("a/x", 0o700).Bytes(),
			want:  []string{"a/ 0755", "a/x/ 0700", "a/y 0644 y1", "d 0600 now a file", "gone/ 0755", "gone/deep 0644 z"},
		},
		{
			name:  "aufs metadata is skipped",
			upper: tartest.New().Dir(".wh..wh.plnk", 0o700).File(".wh..wh.plnk/1.2", "x", 0o644).File(".wh..wh.aufs", "", 0o644).Bytes(),
			want:  []string{"a/ 0755", "a/x 0644 x1", "a/y 0644 y1", "d/ 0755", "d/1 0644 1", "d/sub/ 0755", "d/sub/2 0644 2", "gone/ 0755", "gone/deep 0644 z"},
		},
	}
	// Each case also with the layer's names spilled to disk after every
	// name (Options.SpillDir; runs of one name each).
	for _, spill := range []bool{false, true} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/spilled=%v", c.name, spill), func(t *testing.T) {
				root, _ := sandbox(t)
				opts := Options{}
				if spill {
					opts.SpillDir = t.TempDir()
				}
				a, err := New(root, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				a.paths.limit = 1
				for i, l := range [][]byte{base, c.upper} {
					if err := a.Apply(bytes.NewReader(l)); err != nil {
						t.Fatalf("layer %d: %v", i, err)
					}
				}
				if spill && a.paths.file == nil {
					t.Error("nothing was spilled")
				}
				if diff := cmp.Diff(c.want, tartest.Tree(t, root)); diff != "" {
					t.Errorf("tree (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestMetadata(t *testing.T) {
	root, _ := sandbox(t)
	mtime := time.Date(2020, 2, 3, 4, 5, 6, 0, time.UTC)
	layer := tartest.New().
		Header(&tar.Header{Typeflag: tar.TypeDir, Name: "ro/", Mode: 0o555, ModTime: mtime}, nil).
		Header(&tar.Header{Typeflag: tar.TypeReg, Name: "ro/suid", Mode: 0o4755, ModTime: mtime}, []byte("#!/bin/sh\n")).
		Header(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: mtime}, nil).
		Header(&tar.Header{Typeflag: tar.TypeSymlink, Name: "abs", Linkname: "/does/not/exist", ModTime: mtime}, nil).
		Header(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o750, ModTime: mtime}, nil).
		Bytes()
	a, err := New(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Apply(bytes.NewReader(layer)); err != nil {
		t.Fatal(err)
	}
	if got := a.Stats().DroppedSetid; !cmp.Equal(got, []string{"ro/suid"}) {
		t.Errorf("DroppedSetid = %q, want [ro/suid]", got)
	}
	for name, want := range map[string]fs.FileMode{"ro": fs.ModeDir | 0o555, "ro/suid": 0o755, "tmp": fs.ModeDir | fs.ModeSticky | 0o777, ".": fs.ModeDir | 0o750} {
		st, err := os.Lstat(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != want {
			t.Errorf("mode of %s = %v, want %v", name, st.Mode(), want)
		}
		if !st.ModTime().Equal(mtime) {
			t.Errorf("mtime of %s = %v, want %v", name, st.ModTime(), mtime)
		}
	}
	if target, err := os.Readlink(filepath.Join(root, "abs")); err != nil || target != "/does/not/exist" {
		t.Errorf("Readlink(abs) = %q, %v; want /does/not/exist stored verbatim", target, err)
	}
}

func TestHardlinks(t *testing.T) {
	root, _ := sandbox(t)
	layer := tartest.New().File("a", "same", 0o644).Link("b", "a").Link("b", "a").Dir("d", 0o755).Link("d/c", "/a").Bytes()
	if err := applyLayers(t, root, Options{}, layer); err != nil {
		t.Fatal(err)
	}
	var sa, sc os.FileInfo
	sa, _ = os.Stat(filepath.Join(root, "a"))
	sc, _ = os.Stat(filepath.Join(root, "d/c"))
	if !os.SameFile(sa, sc) {
		t.Errorf("d/c is not a hardlink of a")
	}
}

func TestLimits(t *testing.T) {
	big := strings.Repeat("x", 4096)
	cases := []struct {
		name    string
		opts    Options
		layer   []byte
		wantErr error
	}{
		{"bytes", Options{MaxBytes: 3000}, tartest.New().File("f", big, 0o644).Bytes(), ErrTooLarge},
		{"claimed size refused before reading", Options{MaxBytes: 1 << 20},
			tartest.New().Header(&tar.Header{Typeflag: tar.TypeReg, Name: "huge", Size: 1 << 50, Mode: 0o644}, nil).Truncated(), ErrTooLarge},
		{"entries", Options{MaxEntries: 2}, tartest.New().File("1", "", 0o644).File("2", "", 0o644).File("3", "", 0o644).Bytes(), ErrLimit},
		{"path length", Options{MaxPathLen: 10}, tartest.New().File(strings.Repeat("a", 11), "", 0o644).Bytes(), ErrLimit},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root, _ := sandbox(t)
			if err := applyLayers(t, root, c.opts, c.layer); !errors.Is(err, c.wantErr) {
				t.Errorf("Apply() = %v, want %v", err, c.wantErr)
			}
		})
	}
}

// TestDifferentialGNUTar checks that on benign archives the tree we build is
// the one GNU tar builds: same paths, types, modes, link targets, contents;
// with RuntimeModes, the one GNU tar builds with RuntimeMode applied to each
// of its modes and every owner the user running the test.
func TestDifferentialGNUTar(t *testing.T) {
	gnutar, err := exec.LookPath("tar")
	if err != nil {
		testenv.Missing(t, "GNU tar is not installed (apt-get install tar)")
	}
	layer := tartest.New().
		Dir("usr", 0o755).Dir("usr/bin", 0o755).File("usr/bin/tool", "#!/bin/sh\necho hi\n", 0o755).
		Symlink("usr/bin/alias", "tool").Symlink("usr/abs", "/usr/bin/tool").
		Dir("etc", 0o700).File("etc/conf", "k=v\n", 0o600).Link("etc/conf2", "etc/conf").
		File("implicit/parent/file", "p", 0o640).Dir("empty", 0o711).
		Header(&tar.Header{Typeflag: tar.TypeDir, Name: "home/", Mode: 0o755}, nil).
		Header(&tar.Header{Typeflag: tar.TypeDir, Name: "home/bun/", Mode: 0o700, Uid: 1000, Gid: 1000}, nil).
		Header(&tar.Header{Typeflag: tar.TypeReg, Name: "home/bun/run", Mode: 0o770, Size: 1, Uid: 1000, Gid: 1000}, []byte("x")).
		Header(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}, nil).
		File("open", "w", 0o666).
		Bytes()
	theirs := filepath.Join(t.TempDir(), "gnu")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gnutar, "-xpf", "-", "-C", theirs)
	cmd.Stdin = bytes.NewReader(layer)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, out)
	}
	// Implicit parents: GNU tar makes them with the umask; we make 0755.
	filter := func(lines []string) []string {
		var out []string
		for _, l := range lines {
			if !strings.HasPrefix(l, "implicit/ ") && !strings.HasPrefix(l, "implicit/parent/ ") {
				out = append(out, l)
			}
		}
		return out
	}
	for _, runtimeModes := range []bool{false, true} {
		t.Run(fmt.Sprintf("RuntimeModes=%v", runtimeModes), func(t *testing.T) {
			ours, _ := sandbox(t)
			if err := applyLayers(t, ours, Options{RuntimeModes: runtimeModes}, layer); err != nil {
				t.Fatal(err)
			}
			want := filter(tartest.Tree(t, theirs))
			if runtimeModes {
				want = withRuntimeModes(t, want)
			}
			if diff := cmp.Diff(want, filter(tartest.Tree(t, ours))); diff != "" {
				t.Errorf("tree differs from GNU tar (-tar +ours):\n%s", diff)
			}
			if !runtimeModes {
				return
			}
			// GNU tar run by root applies the image's owners; we never do.
			uid, gid := uint32(os.Geteuid()), uint32(os.Getegid())
			err := filepath.WalkDir(ours, func(p string, _ fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				var st unix.Stat_t
				if err := unix.Lstat(p, &st); err != nil {
					return err
				}
				if st.Uid != uid || st.Gid != gid {
					t.Errorf("%s: owner %d:%d, want %d:%d (the user running Apply)", p, st.Uid, st.Gid, uid, gid)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// withRuntimeModes rewrites the modes of tree lines ("d/ 0755",
// "f 0644 content") by RuntimeMode.
func withRuntimeModes(t *testing.T, lines []string) []string {
	t.Helper()
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l
		if strings.Contains(l, " => ") {
			continue
		}
		f := strings.SplitN(l, " ", 3)
		m, err := strconv.ParseUint(f[1], 8, 32)
		if err != nil {
			t.Fatalf("tree line %q: %v", l, err)
		}
		f[1] = fmt.Sprintf("%04o", RuntimeMode(uint32(m)))
		out[i] = strings.Join(f, " ")
	}
	return out
}

// TestRuntimeMode pins the rule: setuid and setgid dropped, the owner's
// read and execute bits given to group and other, no write bit but the
// owner's, sticky kept.
func TestRuntimeMode(t *testing.T) {
	for in, want := range map[uint32]uint32{
		0o755: 0o755, 0o644: 0o644, 0o700: 0o755, 0o600: 0o644, 0o750: 0o755,
		0o640: 0o644, 0o777: 0o755, 0o666: 0o644, 0o1777: 0o1755, 0o4755: 0o755,
		0o2775: 0o755, 0o555: 0o555, 0o444: 0o444, 0o000: 0o000, 0o044: 0o044,
		0o711: 0o755, 0o604: 0o644, 0o200: 0o200, 0o7777: 0o1755,
	} {
		got := RuntimeMode(in)
		if got != want {
			t.Errorf("RuntimeMode(%04o) = %04o, want %04o", in, got, want)
		}
		if again := RuntimeMode(got); again != got {
			t.Errorf("RuntimeMode(RuntimeMode(%04o)) = %04o, want %04o", in, again, got)
		}
	}
	if _, err := New(t.TempDir(), Options{RuntimeModes: true, PreserveOwners: true}); err == nil {
		t.Error("New with RuntimeModes and PreserveOwners: no error")
	}
}

func TestCleanName(t *testing.T) {
	cases := []struct {
		in, want string
		err      error
	}{
		{"a/b", "a/b", nil}, {"./a/./b/", "a/b", nil}, {"/a", "a", nil}, {".", "", nil}, {"/", "", nil}, {"./", "", nil},
		{"a/../b", "b", nil}, {"..", "", ErrUnsafePath}, {"a/../../b", "", ErrUnsafePath}, {"a\x00b", "", ErrUnsafePath},
	}
	for _, c := range cases {
		got, err := cleanName(c.in)
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("cleanName(%q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
}

// FuzzApply feeds arbitrary streams to the applier: it may refuse them, but
// it must never panic or touch anything outside the root.
func FuzzApply(f *testing.F) {
	f.Add(tartest.New().Symlink("s", "/").File("s/x", "x", 0o644).Bytes())
	f.Add(tartest.New().Symlink("s", "../outside").Opaque("s").Whiteout("s", "secret").Bytes())
	f.Add(tartest.New().Dir("d", 0o755).File("d/f", "f", 0o644).Link("h", "d/f").Whiteout("", "d").Bytes())
	f.Add(tartest.New().File("../x", "x", 0o644).Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		root, outside := sandbox(t)
		before := tartest.Tree(t, outside)
		a, err := New(root, Options{MaxBytes: 1 << 20, MaxEntries: 1000})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		_ = a.Apply(bytes.NewReader(data))
		if diff := cmp.Diff(before, tartest.Tree(t, outside)); diff != "" {
			t.Fatalf("outside changed:\n%s", diff)
		}
	})
}

// TestXattrs checks that SCHILY.xattr.* records reach files and
// directories with Options.Xattrs, and are ignored without it.
func TestXattrs(t *testing.T) {
	x := map[string]string{"SCHILY.xattr.user.hbx": "v\x00binary", "SCHILY.xattr.user.empty": ""}
	layer := tartest.New().
		Header(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755, PAXRecords: x}, nil).
		Header(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o555, PAXRecords: x}, nil).
		Header(&tar.Header{Typeflag: tar.TypeReg, Name: "d/f", Mode: 0o444, PAXRecords: x}, []byte("data")).
		Header(&tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "d/f", PAXRecords: x}, nil).
		Bytes()
	for _, on := range []bool{true, false} {
		root, _ := sandbox(t)
		if err := applyLayers(t, root, Options{Xattrs: on}, layer); err != nil {
			t.Fatalf("Apply(Xattrs: %v) = %v", on, err)
		}
		for _, name := range []string{".", "d", "d/f"} {
			buf := make([]byte, 64)
			n, err := unix.Lgetxattr(filepath.Join(root, name), "user.hbx", buf)
			switch {
			case on && (err != nil || string(buf[:n]) != "v\x00binary"):
				t.Errorf("Xattrs: user.hbx of %s = %q, %v; want %q", name, buf[:max(n, 0)], err, "v\x00binary")
			case !on && !errors.Is(err, unix.ENODATA):
				t.Errorf("no Xattrs: user.hbx of %s: err = %v, want ENODATA", name, err)
			}
		}
		if _, err := unix.Lgetxattr(filepath.Join(root, "l"), "user.hbx", nil); !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EPERM) {
			t.Errorf("user.hbx of the symlink: err = %v, want none set", err)
		}
	}
}

// TestLiteral checks that Options.Literal writes whiteout names as files.
func TestLiteral(t *testing.T) {
	root, _ := sandbox(t)
	layer := tartest.New().File("keep", "k", 0o644).File(".wh.keep", "w", 0o600).Dir("d", 0o755).File("d/.wh..wh..opq", "o", 0o600).File("d/.wh..wh.plnk", "p", 0o600).Bytes()
	if err := applyLayers(t, root, Options{Literal: true}, layer); err != nil {
		t.Fatal(err)
	}
	want := []string{".wh.keep 0600 w", "d/ 0755", "d/.wh..wh..opq 0600 o", "d/.wh..wh.plnk 0600 p", "keep 0644 k"}
	if diff := cmp.Diff(tartest.Tree(t, root), want); diff != "" {
		t.Errorf("tree (-got +want):\n%s", diff)
	}
}

// TestReviewFindings holds the extractor review's findings, each fixed.
func TestReviewFindings(t *testing.T) {
	t.Run("symlink fan-out ends in ELOOP quickly", func(t *testing.T) {
		// Each level names the previous one 6 times: resolving a2 follows
		// far more than 40 links, which must be refused, not walked.
		root, _ := sandbox(t)
		layer := tartest.New().Symlink("a0", ".").Symlink("a1", "a0/a0/a0/a0/a0/a0").
			Symlink("a2", "a1/a1/a1/a1/a1/a1").Symlink("a3", "a2/a2/a2/a2/a2/a2").File("a3/x", "x", 0o644).Bytes()
		start := time.Now()
		err := applyLayers(t, root, Options{}, layer)
		if !errors.Is(err, syscall.ELOOP) {
			t.Errorf("Apply() = %v, want ELOOP", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Apply() took %s, want well under a second", d)
		}
	})
	t.Run("sparse files count their holes against the cap", func(t *testing.T) {
		root, _ := sandbox(t)
		var layer []byte
		for _, n := range []string{"s1", "s2", "s3"} {
			layer = append(layer, tartest.Raw(n, tar.TypeReg, [][2]string{
				{"GNU.sparse.major", "0"}, {"GNU.sparse.minor", "1"}, {"GNU.sparse.size", "50331648"},
				{"GNU.sparse.numblocks", "1"}, {"GNU.sparse.map", "50331647,1"},
			}, []byte("Z"))...)
		}
		layer = append(layer, tartest.End()...)
		if err := applyLayers(t, root, Options{MaxBytes: 64 << 20}, layer); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Apply() = %v, want ErrTooLarge (3 x 48 MiB claimed, cap 64 MiB)", err)
		}
	})
	t.Run("the last entry for a directory wins", func(t *testing.T) {
		root, _ := sandbox(t)
		if err := applyLayers(t, root, Options{}, tartest.New().Dir("d", 0o777).Dir("d", 0o700).Bytes()); err != nil {
			t.Fatal(err)
		}
		if st, _ := os.Stat(filepath.Join(root, "d")); st.Mode().Perm() != 0o700 {
			t.Errorf("mode of d = %v, want 0700 (the later entry)", st.Mode().Perm())
		}
	})
	t.Run("relative symlink targets continue from the resolved directory", func(t *testing.T) {
		root, _ := sandbox(t)
		layer := tartest.New().Dir("d/e", 0o755).Symlink("s", "d/e").Symlink("s/l", "../x").File("s/l/f", "f", 0o644).Bytes()
		if err := applyLayers(t, root, Options{}, layer); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(root, "d/x/f")); err != nil {
			t.Errorf("s/l/f did not land at d/x/f as the kernel resolves it: %v", err)
		}
	})
	t.Run("a whiteout through a symlink alias spares entries of its own layer", func(t *testing.T) {
		root, _ := sandbox(t)
		lower := tartest.New().Dir("d", 0o755).File("d/lower", "l", 0o644).Symlink("s", "d").Bytes()
		upper := tartest.New().File("d/new", "n", 0o644).Opaque("s").Whiteout("s", "new").Bytes()
		if err := applyLayers(t, root, Options{}, lower, upper); err != nil {
			t.Fatal(err)
		}
		want := []string{"d/ 0755", "d/new 0644 n", "s => d"}
		if diff := cmp.Diff(want, tartest.Tree(t, root)); diff != "" {
			t.Errorf("tree (-want +got):\n%s", diff)
		}
	})
}

// TestResolveMatchesKernel compares the extractor's own walk with the
// kernel's openat2(RESOLVE_IN_ROOT) (through pathrs-lite) on a tree full of
// symlinks: both must name the same directory, or both none.
func TestResolveMatchesKernel(t *testing.T) {
	root, _ := sandbox(t)
	layer := tartest.New().
		Dir("a/b/c", 0o755).Dir("x/y", 0o755).
		Symlink("abs", "/a/b").Symlink("rel", "a/b/c").Symlink("up", "a/b/c/../..").
		Symlink("a/b/c/back", "../../../x").Symlink("loop1", "loop2").Symlink("loop2", "loop1").
		Symlink("dangling", "/nowhere").Symlink("root", "/").Symlink("x/y/z", "../../abs/c").
		File("a/file", "f", 0o644).Symlink("tofile", "a/file").
		Bytes()
	a, err := New(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Apply(bytes.NewReader(layer)); err != nil {
		t.Fatal(err)
	}
	rootFile, err := os.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer rootFile.Close()
	for _, name := range []string{"abs", "rel", "up", "a/b/c/back", "a/b/c/back/y", "loop1", "dangling", "root", "root/a/../x",
		"x/y/z", "x/y/z/back/y", "tofile", "abs/../../..", "up/x/y/z", "nope/deeper"} {
		ours, _, ourErr := a.lookupDir(name)
		h, kerr := pathrs.OpenatInRoot(rootFile, name)
		kernelDir := ""
		if kerr == nil {
			var st unix.Stat_t
			unix.Fstat(int(h.Fd()), &st)
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				kernelDir = fmt.Sprint(st.Ino)
			}
			h.Close()
		}
		ourDir := ""
		if ours != nil {
			var st unix.Stat_t
			unix.Fstat(int(ours.Fd()), &st)
			ourDir = fmt.Sprint(st.Ino)
		}
		if ourDir != kernelDir {
			t.Errorf("resolve(%q) = inode %q (err %v), kernel says %q (err %v)", name, ourDir, ourErr, kernelDir, kerr)
		}
	}
}
