// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freePair returns a port p such that p and p+1 are free to listen on
// now, both in the kernel's ephemeral range.
func freePair(t *testing.T) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if l2, err := net.Listen("tcp", ":"+strconv.Itoa(p+1)); err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("found no two free ports in a row")
	return 0
}

// TestReservePortHandsOutEachPortOnce: a port reserved by one holder is
// not handed out again, whether in this process or another (a real
// flock(1) child holding the lock file, as a concurrent shard of make e2e
// would), nor when something listens on it, until the holder releases it.
func TestReservePortHandsOutEachPortOnce(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		Missing(t, "flock is not installed (apt-get install util-linux)")
	}
	cases := []struct {
		name string
		// take holds port p of the range p..p+1 the way the case says.
		take func(t *testing.T, dir string, p int)
	}{
		{"held in this process", func(t *testing.T, dir string, p int) {
			_, release, err := reservePort(dir, p, p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(release)
		}},
		{"held by another process", func(t *testing.T, dir string, p int) {
			cmd := exec.Command("flock", "--exclusive", filepath.Join(dir, strconv.Itoa(p)), "sh", "-c", "echo held; exec sleep 600")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
			buf := make([]byte, 5)
			if n, err := out.Read(buf); err != nil || string(buf[:n]) != "held\n" {
				t.Fatalf("flock child says %q, %v; want held", buf[:n], err)
			}
		}},
		{"listened on", func(t *testing.T, dir string, p int) {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			p := freePair(t)
			c.take(t, dir, p)
			for range 20 { // from a random start each time: never p
				got, release, err := reservePort(dir, p, p+1)
				if err != nil || got != p+1 {
					t.Fatalf("reservePort(%d-%d) = %d, %v; want %d, the one not taken", p, p+1, got, err, p+1)
				}
				release()
			}
			got, release, err := reservePort(dir, p+1, p+1)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			if _, _, err := reservePort(dir, p, p+1); err == nil || !strings.Contains(err.Error(), "all 2 ports "+strconv.Itoa(p)+"-"+strconv.Itoa(p+1)+" are reserved or listened on") {
				t.Fatalf("reservePort with both taken (%d held) = %v; want the error naming the range", got, err)
			}
		})
	}
}

// TestReservePortReleasedByDeath: a reservation ends with its holder,
// even one killed with SIGKILL, so a crashed shard does not hold ports.
func TestReservePortReleasedByDeath(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		Missing(t, "flock is not installed (apt-get install util-linux)")
	}
	dir := t.TempDir()
	p := freePair(t)
	// flock and sleep, which inherits the lock's descriptor: the holder
	// is their process group.
	cmd := exec.Command("flock", "--exclusive", filepath.Join(dir, strconv.Itoa(p)), "sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // only while unreaped: after the Wait below its group's id may be another's
		if cmd.ProcessState == nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
		}
	})
	// Wait until the child holds the lock: this process cannot take it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, release, err := reservePort(dir, p, p)
		if err != nil {
			break
		}
		release()
		if time.Now().After(deadline) {
			t.Fatal("the flock child never took the lock")
		}
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	// sleep, not flock's child once flock is gone, may outlive it briefly.
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var release func()
		if _, release, err = reservePort(dir, p, p); err == nil {
			release()
			return
		}
	}
	t.Fatalf("after its holder died with SIGKILL, reservePort(%d) = %v", p, err)
}

// TestPortLockDirRefusesOthers: the lock directory must be this user's
// and writable by it alone; otherwise FreePort fails naming it rather
// than trusting locks another user could hold or links it could plant.
func TestPortLockDirRefusesOthers(t *testing.T) {
	cases := []struct {
		name    string
		make    func(t *testing.T, path string)
		wantErr bool
	}{
		{"missing: made 0700", func(*testing.T, string) {}, false},
		{"own 0700", func(t *testing.T, p string) { mustDo(t, os.Mkdir(p, 0o700)) }, false},
		{"writable by others", func(t *testing.T, p string) { mustDo(t, os.Mkdir(p, 0o700)); mustDo(t, os.Chmod(p, 0o777)) }, true},
		{"a symbolic link", func(t *testing.T, p string) { mustDo(t, os.Symlink(t.TempDir(), p)) }, true},
		{"a file", func(t *testing.T, p string) { mustDo(t, os.WriteFile(p, nil, 0o600)) }, true},
		{"another user's", func(t *testing.T, p string) {
			if os.Geteuid() != 0 {
				Missing(t, "needs root to chown")
			}
			mustDo(t, os.Mkdir(p, 0o700))
			mustDo(t, os.Chown(p, 65534, 65534))
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "ports")
			c.make(t, p)
			err := ownLockDir(p)
			if (err != nil) != c.wantErr {
				t.Fatalf("ownLockDir = %v, want error %v", err, c.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "port lock directory "+p+" must be a directory of uid ") {
				t.Errorf("error %q does not name the directory and the rule", err)
			}
			if err == nil {
				if st, serr := os.Lstat(p); serr != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
					t.Errorf("lock directory %v, %v; want a directory of mode 0700", st, serr)
				}
			}
		})
	}
}

// TestReservedPortsBelowEphemeral: the ports handed out are the span just
// below the kernel's ephemeral range as its file says, 32768 when the
// file is missing or garbled, never below 1024.
func TestReservedPortsBelowEphemeral(t *testing.T) {
	cases := []struct {
		name, content string
		lo, hi        int
	}{
		{"default range", "32768\t60999\n", 32768 - portSpan, 32767},
		{"raised range", "40000 60999\n", 40000 - portSpan, 39999},
		{"low range", "2000 60999\n", 1024, 1999},
		{"garbled", "many\n", 32768 - portSpan, 32767},
		{"missing", "", 32768 - portSpan, 32767},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "ip_local_port_range")
			if c.content != "" {
				mustDo(t, os.WriteFile(file, []byte(c.content), 0o600))
			}
			if lo, hi := reservedPorts(file); lo != c.lo || hi != c.hi {
				t.Errorf("reservedPorts(%q) = %d-%d, want %d-%d", c.content, lo, hi, c.lo, c.hi)
			}
		})
	}
}

// TestFreePortListensAndReserves: FreePort's port can be listened on and
// is reserved until the test ends.
func TestFreePortListensAndReserves(t *testing.T) {
	dir, err := PortLockDir()
	if err != nil {
		t.Fatal(err)
	}
	p := FreePort(t)
	lo, hi := reservedPorts(ephemeralFile)
	if p < lo || p > hi {
		t.Errorf("FreePort = %d, want one of %d-%d", p, lo, hi)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		t.Fatalf("listen on FreePort's %d: %v", p, err)
	}
	l.Close()
	if _, _, err := reservePort(dir, p, p); err == nil {
		t.Errorf("FreePort's %d was handed out again before the test ended", p)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
