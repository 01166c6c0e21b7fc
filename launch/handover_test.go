package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/testenv"
)

// nobody is the credential the handover tests give root's data to.
var nobody = &syscall.Credential{Uid: 65534, Gid: 65534}

// rootDataDir returns a root-owned data directory for handOver, skipping
// the test when not root (mknod, mount and chown need it).
func rootDataDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to mknod, mount and chown")
	}
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// owner returns the uid owning p (not following a symlink).
func owner(t *testing.T, p string) uint32 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid
}

// TestHandOverLeavesSpecialFilesRoot: device nodes a root payload made
// (a block device 7:0, /dev/mem's 1:1), a FIFO and a socket stay root's
// and are counted; the directory, regular file and symlink beside them
// change hands.
func TestHandOverLeavesSpecialFilesRoot(t *testing.T) {
	dir := rootDataDir(t)
	for _, n := range []struct {
		name string
		mode uint32
		dev  uint64
	}{
		{"disk", unix.S_IFBLK | 0o600, unix.Mkdev(7, 0)},
		{"mem", unix.S_IFCHR | 0o600, unix.Mkdev(1, 1)},
		{"fifo", unix.S_IFIFO | 0o600, 0},
		{"sock", unix.S_IFSOCK | 0o600, 0},
	} {
		if err := unix.Mknod(filepath.Join(dir, n.name), n.mode, int(n.dev)); err != nil {
			t.Fatalf("mknod %s: %v", n.name, err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub/f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/f", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	line, err := handOver(dir, nobody)
	if err != nil {
		t.Fatalf("handOver() = %v", err)
	}
	for name, want := range map[string]uint32{"disk": 0, "mem": 0, "fifo": 0, "sock": 0, "sub": 65534, "sub/f": 65534, "link": 65534} {
		if got := owner(t, filepath.Join(dir, name)); got != want {
			t.Errorf("owner of %s = %d, want %d", name, got, want)
		}
	}
	want := dir + ": 3 entries root's -> 65534:65534; 4 device nodes, FIFOs or sockets left root's"
	if line != want {
		t.Errorf("handOver() = %q, want %q", line, want)
	}
}

// TestHandOverStopsAtMountPoints: a mount point inside the data
// directory (a bind mount of another tree on the same filesystem, a
// tmpfs) is neither entered nor chowned, and counted.
func TestHandOverStopsAtMountPoints(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mount func(src, dst string) error
	}{
		{"bind mount", func(src, dst string) error { return unix.Mount(src, dst, "", unix.MS_BIND, "") }},
		{"tmpfs", func(_, dst string) error { return unix.Mount("tmpfs", dst, "tmpfs", 0, "mode=0700") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := rootDataDir(t)
			victim := t.TempDir()
			mnt := filepath.Join(dir, "mnt")
			if err := os.Mkdir(mnt, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := tc.mount(victim, mnt); err != nil {
				testenv.Missing(t, fmt.Sprintf("mount: %v (no mount privilege here)", err))
			}
			t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
			if err := os.WriteFile(filepath.Join(mnt, "secret"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "own"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			line, err := handOver(dir, nobody)
			if err != nil {
				t.Fatalf("handOver() = %v", err)
			}
			for name, want := range map[string]uint32{"mnt": 0, "mnt/secret": 0, "own": 65534} {
				if got := owner(t, filepath.Join(dir, name)); got != want {
					t.Errorf("owner of %s = %d, want %d", name, got, want)
				}
			}
			if want := "; 1 mount points not crossed"; !strings.HasSuffix(line, want) {
				t.Errorf("handOver() = %q, want it to end %q", line, want)
			}
		})
	}
}
