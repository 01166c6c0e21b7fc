package health

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/internal/testenv"
)

func TestParseNetTCP(t *testing.T) {
	// Rows as a little-endian kernel prints them (amd64, arm64); the
	// parser turns the words back into network order with the host's own
	// byte order, so the fixture holds only on little-endian hosts, which
	// are the ones hbx is built for.
	const tcp = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:12B4 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4243 1 0000000000000000 100 0 0 10 0
   2: 0100007F:12B4 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 4244 1 0000000000000000 20 4 30 10 -1
   3: 0200A8C0:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4245 1 0000000000000000 100 0 0 10 0
`
	const tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:12B4 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5000 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5001 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:12B5 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5002 1 0000000000000000 100 0 0 10 0
`
	tests := []struct {
		name string
		in   string
		want []netTCPEntry
	}{
		{"tcp", tcp, []netTCPEntry{
			{netip.MustParseAddrPort("127.0.0.1:4788"), tcpListen, 4242},
			{netip.MustParseAddrPort("0.0.0.0:8080"), tcpListen, 4243},
			{netip.MustParseAddrPort("127.0.0.1:4788"), 1, 4244},
			{netip.MustParseAddrPort("192.168.0.2:22"), tcpListen, 4245},
		}},
		{"tcp6", tcp6, []netTCPEntry{
			{netip.MustParseAddrPort("[::1]:4788"), tcpListen, 5000},
			{netip.MustParseAddrPort("[::]:8080"), tcpListen, 5001},
			{netip.MustParseAddrPort("[::ffff:127.0.0.1]:4789"), tcpListen, 5002},
		}},
		{"header only", "  sl  local_address\n", nil},
	}
	for _, tt := range tests {
		got, err := parseNetTCP(strings.NewReader(tt.in))
		if err != nil {
			t.Errorf("parseNetTCP(%s) = %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(got, tt.want, cmp.AllowUnexported(netTCPEntry{}), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
			t.Errorf("parseNetTCP(%s) (-got +want):\n%s", tt.name, diff)
		}
	}
	for _, bad := range []string{
		"h\n 0: 0100007F 00000000:0000 0A 0:0 0:0 0 0 0 1\n",
		"h\n 0: 0100007:12B4 00000000:0000 0A 0:0 0:0 0 0 0 1\n",
		"h\n 0: 0100007F:12B4 00000000:0000 0A\n",
		"h\n 0: 0100007F:12B4 00000000:0000 0A 0:0 0:0 0 0 0 x\n",
	} {
		if _, err := parseNetTCP(strings.NewReader(bad)); err == nil {
			t.Errorf("parseNetTCP(%q) = nil error, want one", bad)
		}
	}
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		in         string
		ppid, pgid int
		ok         bool
	}{
		{"1234 (bun) S 1200 1234 1234 0 -1", 1200, 1234, true},
		{"1234 (a (b) c) R 7 1 1", 7, 1, true},
		{"1234 (x", 0, 0, false},
		{"1234 (x) S", 0, 0, false},
		{"1234 (x) S 7", 0, 0, false},
		{"1234 (x) S 7 y 1", 0, 0, false},
	}
	for _, tt := range tests {
		ppid, pgid, ok := parseStat([]byte(tt.in))
		if ppid != tt.ppid || pgid != tt.pgid || ok != tt.ok {
			t.Errorf("parseStat(%q) = %d, %d, %v, want %d, %d, %v", tt.in, ppid, pgid, ok, tt.ppid, tt.pgid, tt.ok)
		}
	}
}

// tree starts the test binary as a process group leader (as the
// supervisor starts a program) listening on addrs, with a child listening
// on childAddrs, and returns its pid and the addresses both bound. With
// daemonAddrs, a double-forked process of its group (no descendant of it)
// listens there too.
func tree(t *testing.T, addrs, childAddrs string, daemonAddrs ...string) (int, []netip.AddrPort) {
	t.Helper()
	return startTree(t, &syscall.SysProcAttr{Setpgid: true}, nil, addrs, childAddrs, daemonAddrs...)
}

// startTree is tree with the helper's SysProcAttr and more environment.
func startTree(t *testing.T, sys *syscall.SysProcAttr, env []string, addrs, childAddrs string, daemonAddrs ...string) (int, []netip.AddrPort) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "HBXTEST_LISTEN="+addrs, "HBXTEST_LISTEN_CHILD="+childAddrs, "HBXTEST_LISTEN_DAEMON="+strings.Join(daemonAddrs, ",")), env...)
	cmd.SysProcAttr = sys
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	r := bufio.NewReader(out)
	lines := 1
	if childAddrs != "" {
		lines++
	}
	if len(daemonAddrs) > 0 {
		lines++
	}
	var bound []netip.AddrPort
	for range lines {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("listening helper: %v", err)
		}
		for _, a := range strings.Split(strings.TrimSpace(line), ",") {
			bound = append(bound, netip.MustParseAddrPort(a))
		}
	}
	return cmd.Process.Pid, bound
}

func TestListeners(t *testing.T) {
	t.Run("loopback only", func(t *testing.T) {
		pid, bound := tree(t, "127.0.0.1:0,[::1]:0", "127.0.0.2:0")
		ls, err := Listeners(pid, bound[0])
		if err != nil {
			t.Fatalf("Listeners() = %v, want nil", err)
		}
		var got []netip.AddrPort
		pids := map[int]bool{}
		for _, l := range ls {
			got = append(got, l.Addr)
			pids[l.PID] = true
		}
		want := []netip.AddrPort{bound[0], bound[2], bound[1]} // sorted: 127.0.0.1, 127.0.0.2, ::1
		if diff := cmp.Diff(got, want, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
			t.Errorf("Listeners() addresses (-got +want):\n%s", diff)
		}
		if len(pids) != 2 || !pids[pid] {
			t.Errorf("Listeners() pids = %v, want the helper %d and its child", pids, pid)
		}
	})
	t.Run("configured port missing", func(t *testing.T) {
		pid, _ := tree(t, "127.0.0.1:0", "")
		want := netip.MustParseAddrPort("127.0.0.1:1")
		_, err := Listeners(pid, want)
		if !errors.Is(err, ErrUnhealthy) || errors.Is(err, ErrNotLoopback) || !strings.Contains(err.Error(), "listens on 127.0.0.1:1") {
			t.Errorf("Listeners() = %v, want ErrUnhealthy naming 127.0.0.1:1", err)
		}
	})
	t.Run("child on any address", func(t *testing.T) {
		pid, bound := tree(t, "127.0.0.1:0", "0.0.0.0:0,[::]:0")
		_, err := Listeners(pid, bound[0])
		if !errors.Is(err, ErrNotLoopback) || !errors.Is(err, ErrUnhealthy) {
			t.Fatalf("Listeners() = %v, want ErrNotLoopback", err)
		}
		for _, a := range bound[1:] {
			if !strings.Contains(err.Error(), a.String()+" (pid ") {
				t.Errorf("Listeners() = %v, want it to name %s", err, a)
			}
		}
	})
	t.Run("no such process", func(t *testing.T) {
		if _, err := Listeners(1<<22+1, netip.AddrPort{}); !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("Listeners(no such pid) = %v, want ErrUnhealthy", err)
		}
	})
}

// TestListenersExact: with executor.exposure network, the tree must listen
// on the configured address and port and, besides it, on loopback only:
// the loopback side ports of its own tree (Executor's tool bridge and
// workerd children) are part of the payload, in its process group too.
func TestListenersExact(t *testing.T) {
	t.Run("exactly the address", func(t *testing.T) {
		pid, bound := tree(t, "0.0.0.0:0", "")
		ls, err := ListenersExact(pid, bound[0])
		if err != nil || len(ls) != 1 {
			t.Fatalf("ListenersExact() = %v, %v, want one listener and nil", ls, err)
		}
		if got, want := DescribeTree(ls, bound[0]), bound[0].String()+" only"; got != want {
			t.Errorf("DescribeTree() = %q, want %q", got, want)
		}
	})
	t.Run("loopback side ports of its tree", func(t *testing.T) {
		pid, bound := tree(t, "0.0.0.0:0,127.0.0.1:0", "127.0.0.1:0,[::1]:0")
		ls, err := ListenersExact(pid, bound[0])
		if err != nil || len(ls) != 4 {
			t.Fatalf("ListenersExact() = %v, %v, want four listeners and nil", ls, err)
		}
		got := DescribeTree(ls, bound[0])
		if want := bound[0].String() + " and 3 loopback side ports of its tree ("; !strings.HasPrefix(got, want) {
			t.Errorf("DescribeTree() = %q, want it to start %q", got, want)
		}
		for _, a := range bound[1:] {
			if !strings.Contains(got, a.String()+" pid ") {
				t.Errorf("DescribeTree() = %q, want it to name %s with its pid", got, a)
			}
		}
	})
	t.Run("a second listener off loopback", func(t *testing.T) {
		pid, bound := tree(t, "0.0.0.0:0", "127.0.0.1:0,[::]:0")
		_, err := ListenersExact(pid, bound[0])
		if !errors.Is(err, ErrStrayListener) || !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), bound[2].String()+" (pid ") {
			t.Fatalf("ListenersExact() = %v, want ErrStrayListener naming %s", err, bound[2])
		}
		if strings.Contains(err.Error(), bound[1].String()) {
			t.Errorf("ListenersExact() = %v, names the loopback side port %s", err, bound[1])
		}
	})
	t.Run("a double-forked listener of its process group", func(t *testing.T) {
		// Reparented away from the tree (to init or the supervisor, a
		// subreaper), still in the program's process group.
		pid, bound := tree(t, "0.0.0.0:0", "", "127.0.0.2:0")
		ls, err := ListenersExact(pid, bound[0])
		if err != nil || len(ls) != 2 {
			t.Fatalf("ListenersExact() = %v, %v, want the group's loopback side port accepted", ls, err)
		}
		pid, bound = tree(t, "0.0.0.0:0", "", "0.0.0.0:0")
		if _, err := ListenersExact(pid, bound[0]); !errors.Is(err, ErrStrayListener) || !strings.Contains(err.Error(), bound[1].String()+" (pid ") {
			t.Fatalf("ListenersExact() = %v, want ErrStrayListener naming %s", err, bound[1])
		}
		pid, bound = tree(t, "127.0.0.1:0", "", "0.0.0.0:0")
		if _, err := Listeners(pid, bound[0]); !errors.Is(err, ErrNotLoopback) {
			t.Fatalf("Listeners() = %v, want ErrNotLoopback", err)
		}
	})
	t.Run("the wrong family", func(t *testing.T) {
		pid, bound := tree(t, "[::]:0", "")
		want := netip.AddrPortFrom(netip.MustParseAddr("0.0.0.0"), bound[0].Port())
		_, err := ListenersExact(pid, want)
		if !errors.Is(err, ErrStrayListener) {
			t.Fatalf("ListenersExact(%s) = %v, want ErrStrayListener", want, err)
		}
	})
	t.Run("a listener outside the tree", func(t *testing.T) {
		// Another process on loopback (not of the tree) is not the
		// payload's: it neither counts as the configured listener nor
		// as a side port.
		_, other := tree(t, "127.0.0.1:0", "")
		pid, bound := tree(t, "127.0.0.1:0", "")
		ls, err := Listeners(pid, bound[0])
		if err != nil || len(ls) != 1 {
			t.Fatalf("Listeners() = %v, %v, want only its own listener", ls, err)
		}
		if _, err := Listeners(pid, other[0]); !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "nothing of pid") {
			t.Errorf("Listeners(another process's address %s) = %v, want nothing of the tree listening there", other[0], err)
		}
	})
}

// TestListenersUnreadableFds: root without CAP_SYS_PTRACE (a container's
// default) lists another user's /proc/<pid>/fd but cannot read where the
// entries point. Listeners then says so and what to do, not that the
// process listens on nothing. The helper listens as nobody; this test's
// thread drops CAP_SYS_PTRACE from its effective set (capabilities are
// per thread) and probes from that thread.
func TestListenersUnreadableFds(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root: runs a helper as nobody and drops CAP_SYS_PTRACE")
	}
	// The test binary, where nobody may run it.
	dir, err := os.MkdirTemp("", "hbx-listeners-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "health.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "HBXTEST_LISTEN=127.0.0.1:0", "HBXTEST_LISTEN_CHILD=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("listening helper: %v", err)
	}
	bound := netip.MustParseAddrPort(strings.TrimSpace(line))
	pid := cmd.Process.Pid

	// As root with every capability the listener is seen.
	if _, err := Listeners(pid, bound); err != nil {
		t.Fatalf("Listeners() as root = %v, want nil", err)
	}
	// Without CAP_SYS_PTRACE root lists the fds but cannot read their
	// targets; without the DAC capabilities too (a user other than the
	// executor's) it cannot even list them. Both are unknown, not none.
	for _, drop := range []struct {
		name string
		caps []int
	}{
		{"CAP_SYS_PTRACE", []int{unix.CAP_SYS_PTRACE}},
		{"CAP_SYS_PTRACE+CAP_DAC_*", []int{unix.CAP_SYS_PTRACE, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH}},
	} {
		lerr, xerr := listenersWithout(t, pid, bound, drop.caps)
		for name, err := range map[string]error{"Listeners": lerr, "ListenersExact": xerr} {
			want := fmt.Sprintf("cannot read pid %d's open files: ", pid)
			if !errors.Is(err, ErrProcUnreadable) || !errors.Is(err, ErrUnhealthy) || !errors.Is(err, os.ErrPermission) ||
				!strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "CAP_SYS_PTRACE") {
				t.Errorf("%s() without %s = %v, want ErrProcUnreadable containing %q and naming CAP_SYS_PTRACE", name, drop.name, err, want)
			}
		}
		t.Logf("without %s: %v", drop.name, lerr)
	}
}

// listenersWithout runs Listeners and ListenersExact on a locked thread
// whose effective capabilities lack caps (the thread exits with its
// goroutine, so the rest of the test keeps them).
func listenersWithout(t *testing.T, pid int, bound netip.AddrPort, caps []int) (lerr, xerr error) {
	t.Helper()
	type result struct {
		lerr, xerr error
		setup      error
	}
	done := make(chan result)
	go func() {
		// Never unlocked: the thread with the dropped capabilities
		// exits with this goroutine.
		runtime.LockOSThread()
		var r result
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			r.setup = err
			done <- r
			return
		}
		for _, c := range caps {
			data[0].Effective &^= 1 << c
		}
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			r.setup = err
			done <- r
			return
		}
		_, r.lerr = Listeners(pid, bound)
		_, r.xerr = ListenersExact(pid, bound)
		done <- r
	}()
	r := <-done
	if r.setup != nil {
		t.Fatalf("drop capabilities %v: %v", caps, r.setup)
	}
	return r.lerr, r.xerr
}
