package release

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// deriveTree makes the tree the WalkChanged tests walk: a, d/, d/f, d/g
// and z, regular files except d.
func deriveTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "d/f", "d/g", "z"} {
		if err := os.WriteFile(filepath.Join(root, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// openList writes body as the files.json of a release directory of its
// own and opens it; nil body: the list Walk makes of root.
func openList(t *testing.T, root string, body []byte) *FileList {
	t.Helper()
	inst := &Installed{Dir: t.TempDir()}
	if body == nil {
		files, err := Scan(root, nil)
		if err != nil {
			t.Fatal(err)
		}
		writeFiles(t, inst, files)
	} else if err := os.WriteFile(filepath.Join(inst.Dir, FilesFile), body, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := inst.OpenFiles()
	if err != nil {
		t.Fatalf("OpenFiles() = %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestWalkChangedMatchesWalk: on a tree that changed in one directory
// since its list was made, WalkChanged emits what Walk emits, looking at
// the changed directory's children only and taking the unchanged
// directory's entries from the list.
func TestWalkChangedMatchesWalk(t *testing.T) {
	root := deriveTree(t)
	old := openList(t, root, nil)
	if err := os.WriteFile(filepath.Join(root, "b"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "z")); err != nil {
		t.Fatal(err)
	}
	want, err := Scan(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []File
	st, err := WalkChanged(root, old, func(dir string) bool { return dir == "" }, nil, func(f File) error {
		got = append(got, f)
		return nil
	})
	if err != nil {
		t.Fatalf("WalkChanged() = %v", err)
	}
	if d := cmp.Diff(got, want); d != "" {
		t.Errorf("WalkChanged() emitted (-got +want):\n%s", d)
	}
	if st != (DeriveStats{Looked: 3, Kept: 2}) {
		t.Errorf("WalkChanged() stats = %+v, want 3 looked at (a, b, d), 2 kept (d/f, d/g)", st)
	}
}

// TestWalkChangedErrors: every error of WalkChanged, on a real tree and
// list: the rootfs it cannot open, a files.json damaged wherever the walk
// reads it next (ErrCorrupt), emit's own error (at an entry looked at and
// at one kept), and an entry that is of no type a release holds or that
// changes under the walk (gone before its lstat or its hash, a directory
// replaced before it is opened). The error says what and where; nothing
// is emitted past it.
func TestWalkChangedErrors(t *testing.T) {
	errEmit := errors.New("emit: disk full")
	entry := func(p, typ string) string { return `{"path":"` + p + `","type":"` + typ + `","mode":420}` }
	all := func(string) bool { return true }
	rootOnly := func(dir string) bool { return dir == "" }
	cases := []struct {
		name    string
		rootfs  func(t *testing.T, root string) string // the rootfs to walk; nil: root
		list    string                                 // files.json; "": Walk's list of the tree
		changed func(string) bool
		hashOf  func(root string) func(uint64) (string, bool)
		emit    func(root string, f File) error // before the entry is recorded
		wantErr error
		wantMsg string
		emitted int // entries emitted before the error
	}{
		{name: "rootfs missing", rootfs: func(t *testing.T, root string) string { return filepath.Join(root, "nope") },
			changed: all, wantErr: unix.ENOENT, wantMsg: "scan rootfs: "},
		{name: "rootfs a file", rootfs: func(t *testing.T, root string) string { return filepath.Join(root, "a") },
			changed: all, wantErr: unix.ENOTDIR, wantMsg: "scan rootfs: "},
		{name: "first entry not an entry", list: `[{"path":1}]`, changed: all,
			wantErr: ErrCorrupt, wantMsg: "parse files.json: "},
		{name: "array not closed", list: "[" + entry("a", "file") + "," + entry("d", "dir") + "," + entry("d/f", "file") + "," + entry("d/g", "file") + "," + entry("z", "file"),
			changed: all, wantErr: ErrCorrupt, wantMsg: "array not closed", emitted: 5},
		{name: "damaged while skipping names gone from the tree", list: "[" + entry("0gone", "file") + ", 5]",
			changed: all, wantErr: ErrCorrupt, wantMsg: "parse files.json: "},
		{name: "damaged after an entry it lists", list: "[" + entry("a", "file") + ", 5]",
			changed: all, wantErr: ErrCorrupt, wantMsg: "parse files.json: ", emitted: 1},
		{name: "damaged in an unchanged directory", list: "[" + entry("a", "file") + "," + entry("d", "dir") + "," + entry("d/f", "file") + ", 5]",
			changed: rootOnly, wantErr: ErrCorrupt, wantMsg: "parse files.json: ", emitted: 3},
		{name: "emit fails at an entry looked at", changed: all,
			emit:    func(_ string, f File) error { return errEmit },
			wantErr: errEmit, wantMsg: "scan rootfs: emit: disk full"},
		{name: "emit fails at an entry kept", changed: rootOnly,
			emit: func(_ string, f File) error {
				if f.Path == "d/f" {
					return errEmit
				}
				return nil
			},
			wantErr: errEmit, wantMsg: "scan rootfs: emit: disk full", emitted: 2},
		{name: "a fifo", rootfs: func(t *testing.T, root string) string {
			if err := unix.Mkfifo(filepath.Join(root, "d/p"), 0o644); err != nil {
				t.Fatal(err)
			}
			return root
		}, changed: all, wantMsg: `scan rootfs: "d/p": unexpected file type 010000`, emitted: 4},
		{name: "gone before its lstat", changed: all,
			emit: func(root string, f File) error {
				if f.Path == "a" {
					return os.Remove(filepath.Join(root, "z"))
				}
				return nil
			},
			wantErr: unix.ENOENT, wantMsg: `scan rootfs: lstat "z": `, emitted: 4},
		{name: "gone before its hash", changed: all,
			hashOf: func(root string) func(uint64) (string, bool) {
				return func(uint64) (string, bool) {
					_ = os.Remove(filepath.Join(root, "a"))
					return "", false
				}
			},
			wantErr: unix.ENOENT, wantMsg: `scan rootfs: hash "a": `},
		{name: "directory replaced before it is opened", changed: all,
			emit: func(root string, f File) error {
				if f.Path != "d" {
					return nil
				}
				if err := os.RemoveAll(filepath.Join(root, "d")); err != nil {
					return err
				}
				return os.WriteFile(filepath.Join(root, "d"), nil, 0o644)
			},
			wantErr: unix.ENOTDIR, wantMsg: `scan rootfs: open "d": `, emitted: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := deriveTree(t)
			var body []byte
			if tc.list != "" {
				body = []byte(tc.list)
			}
			old := openList(t, root, body)
			rootfs := root
			if tc.rootfs != nil {
				rootfs = tc.rootfs(t, root)
			}
			var hashOf func(uint64) (string, bool)
			if tc.hashOf != nil {
				hashOf = tc.hashOf(root)
			}
			var emitted []string
			_, err := WalkChanged(rootfs, old, tc.changed, hashOf, func(f File) error {
				if tc.emit != nil {
					if err := tc.emit(root, f); err != nil {
						return err
					}
				}
				emitted = append(emitted, f.Path)
				return nil
			})
			if err == nil {
				t.Fatalf("WalkChanged() = nil, want an error %q (emitted %v)", tc.wantMsg, emitted)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("WalkChanged() = %v, want it to wrap %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("WalkChanged() = %q, want it to say %q", err, tc.wantMsg)
			}
			if len(emitted) != tc.emitted {
				t.Errorf("WalkChanged() emitted %v before its error, want %d entries", emitted, tc.emitted)
			}
		})
	}
}
