package extract

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
)

// TestTimesOutsideUnixNano: entries dated after 2262 and before 1678 (where
// time.Time.UnixNano overflows) get the times GNU tar gives them from the
// same archive, to the nanosecond: exactly the tar's where the filesystem
// holds them, clamped by the kernel the same way where it does not. Before,
// a file dated 2400-01-01 landed with mtime 1901-12-13. Both a PAX archive
// (archive/tar) and GNU tar's own (--format=gnu, base-256 times) are read.
func TestTimesOutsideUnixNano(t *testing.T) {
	gnutar, err := exec.LookPath("tar")
	if err != nil {
		testenv.Missing(t, "GNU tar is not installed (apt-get install tar)")
	}
	late := time.Date(2400, 1, 1, 0, 0, 0, 123456789, time.UTC)
	early := time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)
	inRange := time.Date(2020, 2, 3, 4, 5, 6, 7, time.UTC)
	pax := tartest.New().
		Header(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755, ModTime: late}, nil).
		Header(&tar.Header{Typeflag: tar.TypeReg, Name: "d/late", Mode: 0o644, ModTime: late, AccessTime: inRange}, []byte("l")).
		Header(&tar.Header{Typeflag: tar.TypeReg, Name: "early", Mode: 0o644, ModTime: early}, []byte("e")).
		Header(&tar.Header{Typeflag: tar.TypeSymlink, Name: "link", Linkname: "d/late", ModTime: late}, nil).
		Header(&tar.Header{Typeflag: tar.TypeReg, Name: "now", Mode: 0o644, ModTime: inRange}, []byte("n")).
		Bytes()
	src := t.TempDir()
	tartest.Write(t, src, "g/ 0755", "g/late 0644 l", "g/early 0644 e",
		"g/late mtime "+late.Format(time.RFC3339Nano), "g/early mtime "+early.Format(time.RFC3339Nano))
	gnu, err := exec.Command(gnutar, "--format=gnu", "-cf", "-", "-C", src, "g/late", "g/early").Output()
	if err != nil {
		t.Fatalf("tar -c: %v", err)
	}
	for _, c := range []struct {
		name  string
		layer []byte
		paths []string
	}{
		{"PAX", pax, []string{"d", "d/late", "early", "link", "now"}},
		{"GNU", gnu, []string{"g/late", "g/early"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			theirs := filepath.Join(t.TempDir(), "gnu")
			if err := os.Mkdir(theirs, 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(gnutar, "-xpf", "-", "-C", theirs)
			cmd.Stdin = bytes.NewReader(c.layer)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("tar -x: %v\n%s", err, out)
			}
			ours, _ := sandbox(t)
			if err := applyLayers(t, ours, Options{}, c.layer); err != nil {
				t.Fatal(err)
			}
			// GNU tar sets atimes to now; we keep the tar's (mtime when none).
			for _, p := range c.paths {
				got, want := statTimes(t, filepath.Join(ours, p)), statTimes(t, filepath.Join(theirs, p))
				if !got[1].Equal(want[1]) {
					t.Errorf("%s: mtime %v, want %v (GNU tar's)", p, got[1], want[1])
				}
				if !got[0].Equal(got[1]) && p != "d/late" {
					t.Errorf("%s: atime %v, want the mtime %v (the entry has no atime)", p, got[0], got[1])
				}
			}
			// Where the filesystem holds 2400 (ext4 with 256-byte inodes,
			// tmpfs, xfs with bigtime) it is exact: GNU tar's format has
			// whole seconds only.
			p, exact := "d/late", late
			if c.name == "GNU" {
				p, exact = "g/late", late.Truncate(time.Second)
			}
			if statTimes(t, filepath.Join(theirs, p))[1].Year() == 2400 {
				if got := statTimes(t, filepath.Join(ours, p)); !got[1].Equal(exact) || c.name == "PAX" && !got[0].Equal(inRange) {
					t.Errorf("%s: atime, mtime = %v, want %v, %v", p, got, inRange, exact)
				}
			}
		})
	}
}

// statTimes is the atime and mtime of p, not following a symlink.
func statTimes(t *testing.T, p string) [2]time.Time {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return [2]time.Time{time.Unix(st.Atim.Unix()).UTC(), time.Unix(st.Mtim.Unix()).UTC()}
}
