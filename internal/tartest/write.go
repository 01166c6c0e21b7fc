package tartest

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Write lays out a tree in dir from lines of the DSL Tree reads: "d/ 0750"
// (made with its parents), "f 0640 content", "l => target"; and, to build
// what Tree does not show, "h == f" (a hardlink to f), "f xattr user.k=v"
// (after f exists), "f owner 1000:1000", "f mtime
// 2020-01-02T03:04:05.123456789Z" and "f bytes N seed" (N bytes of
// PseudoRandom). Modes are set exactly, whatever the umask, setuid, setgid
// and sticky bits included. Any failure
// fails t naming the line.
func Write(t testing.TB, dir string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if err := writeLine(dir, l); err != nil {
			t.Fatalf("write %q: %v", l, err)
		}
	}
}

// writeLine applies one line of Write's DSL under dir.
func writeLine(dir, l string) error {
	name, rest, _ := strings.Cut(l, " ")
	p := filepath.Join(dir, strings.TrimSuffix(name, "/"))
	switch {
	case strings.HasSuffix(name, "/") && rest != "" && rest[0] >= '0' && rest[0] <= '7':
		var mode uint32
		fmt.Sscanf(rest, "%o", &mode)
		if err := os.MkdirAll(p, 0o700); err != nil {
			return err
		}
		return os.Chmod(p, fileMode(mode))
	case strings.HasPrefix(rest, "=> "):
		return os.Symlink(strings.TrimPrefix(rest, "=> "), p)
	case strings.HasPrefix(rest, "== "):
		return os.Link(filepath.Join(dir, strings.TrimPrefix(rest, "== ")), p)
	case strings.HasPrefix(rest, "xattr "):
		k, v, _ := strings.Cut(strings.TrimPrefix(rest, "xattr "), "=")
		return unix.Lsetxattr(p, k, []byte(v), 0)
	case strings.HasPrefix(rest, "owner "):
		var uid, gid int
		fmt.Sscanf(strings.TrimPrefix(rest, "owner "), "%d:%d", &uid, &gid)
		return os.Lchown(p, uid, gid)
	case strings.HasPrefix(rest, "mtime "):
		mt, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(rest, "mtime "))
		if err != nil {
			return err
		}
		ts, err := unix.TimeToTimespec(mt) // UnixNano overflows outside 1678-2262
		if err != nil {
			return err
		}
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	case strings.HasPrefix(rest, "bytes "):
		var n, seed int
		fmt.Sscanf(strings.TrimPrefix(rest, "bytes "), "%d %d", &n, &seed)
		return os.WriteFile(p, PseudoRandom(n, seed), 0o600)
	default:
		mode, content, _ := strings.Cut(rest, " ")
		var m uint32
		fmt.Sscanf(mode, "%o", &m)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			return err
		}
		return os.Chmod(p, fileMode(m))
	}
}

// fileMode turns Unix permission bits (0o7777) into the fs.FileMode
// os.Chmod takes: setuid, setgid and sticky as Go's mode bits.
func fileMode(bits uint32) fs.FileMode {
	m := fs.FileMode(bits & 0o777)
	if bits&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if bits&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if bits&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// PseudoRandom returns n bytes that do not compress, the same for the same
// seed.
func PseudoRandom(n, seed int) []byte {
	out := make([]byte, 0, n+32)
	h := sha256.Sum256([]byte(fmt.Sprint(seed)))
	for len(out) < n {
		out = append(out, h[:]...)
		h = sha256.Sum256(h[:])
	}
	return out[:n]
}
