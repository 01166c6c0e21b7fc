package fsat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadDirents: every entry of a directory comes back once, with its
// inode number and type ("." and ".." left out), also past one getdents
// buffer; the same descriptor then gives nothing more; ReadDirNames gives
// the same names.
func TestReadDirents(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files int // regular files besides one directory and one symlink
	}{
		{"empty but for a dir and a symlink", 0},
		{"a few", 3},
		{"more than one buffer", 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			want := map[string]uint32{"sub": unix.S_IFDIR, "link": unix.S_IFLNK}
			if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("sub", filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
			for i := range tc.files {
				n := fmt.Sprintf("file-with-a-longish-name-%05d", i)
				if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
					t.Fatal(err)
				}
				want[n] = unix.S_IFREG
			}
			open := func() int {
				t.Helper()
				fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { unix.Close(fd) })
				return fd
			}
			fd := open()
			ents, err := ReadDirents(fd)
			if err != nil {
				t.Fatalf("ReadDirents() = %v", err)
			}
			if len(ents) != len(want) {
				t.Fatalf("ReadDirents() gave %d entries, want %d", len(ents), len(want))
			}
			for _, e := range ents {
				var st unix.Stat_t
				if err := unix.Lstat(filepath.Join(dir, e.Name), &st); err != nil {
					t.Fatal(err)
				}
				if e.Mode != want[e.Name] || e.Ino != st.Ino {
					t.Errorf("entry %q: mode %#o ino %d, want %#o ino %d", e.Name, e.Mode, e.Ino, want[e.Name], st.Ino)
				}
			}
			if more, err := ReadDirents(fd); len(more) != 0 || err != nil {
				t.Errorf("ReadDirents() again on the same descriptor = %d entries, %v; want none (it reads on from its position)", len(more), err)
			}
			names, err := ReadDirNames(open())
			if err != nil {
				t.Fatalf("ReadDirNames() = %v", err)
			}
			slices.Sort(names)
			var wantNames []string
			for n := range want {
				wantNames = append(wantNames, n)
			}
			slices.Sort(wantNames)
			if !slices.Equal(names, wantNames) {
				t.Errorf("ReadDirNames() = %d names, want %d (%q...)", len(names), len(wantNames), wantNames[:min(3, len(wantNames))])
			}
		})
	}
}

// TestReadDirentsRefusesAFile: a descriptor of a regular file is not
// listed: ENOTDIR, from both.
func TestReadDirentsRefusesAFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := ReadDirents(fd); !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("ReadDirents(file) = %v, want ENOTDIR", err)
	}
	if _, err := ReadDirNames(fd); !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("ReadDirNames(file) = %v, want ENOTDIR", err)
	}
}
