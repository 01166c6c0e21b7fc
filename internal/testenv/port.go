// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// portSpan is how many ports below the kernel's ephemeral range
// [FreePort] hands out.
const portSpan = 4000

// ephemeralFile holds the kernel's ephemeral port range ("low high"),
// the ports a listen on port 0 or an outgoing connection takes.
const ephemeralFile = "/proc/sys/net/ipv4/ip_local_port_range"

// FreePort returns a TCP port that nothing listens on (on any local
// address) and that stays reserved for t until it ends, for a process the
// test starts later to listen on, perhaps again and again (a supervisor
// restarting Executor). The port is one of the [portSpan] ports just
// below the kernel's ephemeral range (ip_local_port_range, 32768 when it
// cannot be read), so no listen on port 0 (a registry, hbx's rehearsal)
// and no outgoing connection ever takes it; and it is held by an
// exclusive flock on a file named after it in [PortLockDir], so no other
// FreePort, in this process or another (make e2e's concurrent shards, a
// second worktree's suite), hands it out meanwhile. The lock goes with the
// process, even one killed with SIGKILL. FreePort fails the test when the
// lock directory is unsafe or every port is taken.
func FreePort(t testing.TB) int {
	t.Helper()
	dir, err := PortLockDir()
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := reservedPorts(ephemeralFile)
	port, release, err := reservePort(dir, lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return port
}

// PortLockDir returns the directory of [FreePort]'s lock files,
// hbxtest-ports-UID under os.TempDir(), creating it mode 0700. It returns
// an error when the path is not a directory of this user's that only the
// user may write: another user could otherwise hold every port, or plant
// symbolic links.
func PortLockDir() (string, error) {
	dir := filepath.Join(os.TempDir(), "hbxtest-ports-"+strconv.Itoa(os.Getuid()))
	return dir, ownLockDir(dir)
}

// ownLockDir creates dir mode 0700 if missing and checks that it is a
// directory of this user's, not writable by group or others.
func ownLockDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make port lock directory: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("check port lock directory: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Getuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("port lock directory %s must be a directory of uid %d writable by it alone (mode %04o, uid %d)", dir, os.Getuid(), st.Mode&0o7777, st.Uid)
	}
	return nil
}

// reservedPorts returns the [portSpan] ports just below the ephemeral
// range that file gives (32768 when it cannot be read), from 1024 at
// the lowest.
func reservedPorts(file string) (lo, hi int) {
	low := 32768
	if b, err := os.ReadFile(file); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 1024 {
				low = v
			}
		}
	}
	return max(1024, low-portSpan), low - 1
}

// reservePort takes the first port of lo..hi, from a random one on, whose
// lock file in dir it can flock and that it can listen on on every
// address; release closes the lock file, ending the reservation. The lock
// files stay: removing one would let two holders lock two files of the
// same name.
func reservePort(dir string, lo, hi int) (port int, release func(), err error) {
	n := hi - lo + 1
	start := rand.IntN(n)
	for i := range n {
		p := lo + (start+i)%n
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return 0, nil, fmt.Errorf("reserve port %d: %w", p, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue // another FreePort holds it
			}
			return 0, nil, fmt.Errorf("reserve port %d: lock %s: %w", p, f.Name(), err)
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			f.Close() // something that does not reserve listens on it
			continue
		}
		l.Close()
		return p, func() { f.Close() }, nil
	}
	return 0, nil, fmt.Errorf("reserve a port: all %d ports %d-%d are reserved or listened on", n, lo, hi)
}
