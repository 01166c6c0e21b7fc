package health

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hermesbox/hbx/internal/progcgroup"
)

// ErrNotLoopback is wrapped (with ErrUnhealthy) by the error of Listeners
// when a listening socket of the process tree is bound to an address
// other than loopback: 0.0.0.0, ::, or an interface address.
var ErrNotLoopback = errors.New("listener not on loopback")

// ErrProcUnreadable is wrapped by the error of Listeners and
// ListenersExact when a process of the tree lists open files whose targets
// this process may not read (root without CAP_SYS_PTRACE, as in a
// container by default, and an Executor of another user): its listeners
// are unknown, not absent.
var ErrProcUnreadable = errors.New("cannot read a process's open files")

// unreadableError is the error for pid's unreadable open files; it
// wraps ErrProcUnreadable and err, the failed read.
type unreadableError struct {
	pid int
	err error
}

// Error names the pid, the failed read and what to do.
func (e *unreadableError) Error() string {
	return fmt.Sprintf("cannot read pid %d's open files: %v (seeing another user's sockets takes root with CAP_SYS_PTRACE, or that user; in a container add the capability, e.g. compose cap_add: [SYS_PTRACE])", e.pid, e.err)
}

// Unwrap returns ErrProcUnreadable and the failed read.
func (e *unreadableError) Unwrap() []error { return []error{ErrProcUnreadable, e.err} }

// procRoot is where procfs is mounted.
const procRoot = "/proc"

// Listener is one TCP socket in LISTEN state.
type Listener struct {
	Addr  netip.AddrPort // local address as bound: 0.0.0.0:4788, [::1]:4788
	PID   int            // a process of the tree that holds it
	Inode uint64         // socket inode
}

// Listeners checks the TCP sockets in LISTEN state held by the process
// tree rooted at pid (pid and every descendant, found through the ppid
// field of /proc/<n>/stat; when pid leads a process group, as a
// supervised program does, also every member of that group and its
// descendants, so a double-forked listener counts). It finds them through the socket inodes of
// /proc/<n>/fd and the tables /proc/<pid>/net/tcp and tcp6 (so in pid's
// network namespace). It returns them, sorted by address, and nil when
// every one is bound to a loopback address (127.0.0.0/8 or ::1, also
// IPv4-mapped) and want is among them; want may be the zero AddrPort to
// skip that part. Otherwise the error wraps ErrUnhealthy, and also
// ErrNotLoopback when a listener is off loopback; it names every such
// address with its pid. Reading another user's /proc/<n>/fd needs root or
// that user. It is check listeners and the supervisor's listener probe.
func Listeners(pid int, want netip.AddrPort) ([]Listener, error) {
	ls, err := processListeners(procRoot, pid)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnhealthy, err)
	}
	var exposed []string
	found := false
	for _, l := range ls {
		if !l.Addr.Addr().Unmap().IsLoopback() {
			exposed = append(exposed, fmt.Sprintf("%s (pid %d)", l.Addr, l.PID))
		}
		if sameAddrPort(l.Addr, want) {
			found = true
		}
	}
	if len(exposed) > 0 {
		return ls, fmt.Errorf("%w: %w: %s", ErrUnhealthy, ErrNotLoopback, strings.Join(exposed, ", "))
	}
	if want.IsValid() && !found {
		return ls, fmt.Errorf("%w: nothing of pid %d's tree listens on %s (it listens on %s)", ErrUnhealthy, pid, want, describe(ls))
	}
	return ls, nil
}

// ErrStrayListener is wrapped (with ErrUnhealthy) by the error of
// ListenersExact when the process tree listens off loopback somewhere
// other than the configured address and port.
var ErrStrayListener = errors.New("listener off the configured address")

// ListenersExact is Listeners for an Executor exposed to the network
// (executor.exposure network): it returns nil only when the tree of pid
// listens on want (as bound: 0.0.0.0:4788 is not [::]:4788, and an
// IPv4-mapped address counts as its IPv4 one) and, besides it, on loopback
// addresses only: the side ports of its own tree (Executor's tool bridge
// and its workerd children since v1.5.30) are part of the payload, and
// only processes of the tree are looked at. Otherwise the error wraps
// ErrUnhealthy, and also ErrStrayListener when a listener is off loopback
// elsewhere; it names every such address with its pid. want must be
// valid.
func ListenersExact(pid int, want netip.AddrPort) ([]Listener, error) {
	ls, err := processListeners(procRoot, pid)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnhealthy, err)
	}
	var stray []string
	found := false
	for _, l := range ls {
		switch {
		case sameAddrPort(l.Addr, want):
			found = true
		case !l.Addr.Addr().Unmap().IsLoopback():
			stray = append(stray, fmt.Sprintf("%s (pid %d)", l.Addr, l.PID))
		}
	}
	if len(stray) > 0 {
		return ls, fmt.Errorf("%w: %w %s (nor on loopback): %s", ErrUnhealthy, ErrStrayListener, want, strings.Join(stray, ", "))
	}
	if !found {
		return ls, fmt.Errorf("%w: nothing of pid %d's tree listens on %s (it listens on %s)", ErrUnhealthy, pid, want, describe(ls))
	}
	return ls, nil
}

// DescribeTree renders the listeners of a tree that passed Listeners or
// ListenersExact for a reason line: "127.0.0.1:4788 only", or with side
// ports, "0.0.0.0:4788 and 2 loopback side ports of its tree
// (127.0.0.1:40629 pid 19170, 127.0.0.1:44319 pid 19192)". Listeners on
// want are the main ones; a zero want makes every listener a main one.
func DescribeTree(ls []Listener, want netip.AddrPort) string {
	var main, side []Listener
	for _, l := range ls {
		if !want.IsValid() || sameAddrPort(l.Addr, want) {
			main = append(main, l)
		} else {
			side = append(side, l)
		}
	}
	if len(side) == 0 {
		return describe(main) + " only"
	}
	s := make([]string, len(side))
	for i, l := range side {
		s[i] = fmt.Sprintf("%s pid %d", l.Addr, l.PID)
	}
	ports := "ports"
	if len(side) == 1 {
		ports = "port"
	}
	return fmt.Sprintf("%s and %d loopback side %s of its tree (%s)", describe(main), len(side), ports, strings.Join(s, ", "))
}

// sameAddrPort reports whether a and b are one address and port, an
// IPv4-mapped address counting as its IPv4 one.
func sameAddrPort(a, b netip.AddrPort) bool {
	return a.Addr().Unmap() == b.Addr().Unmap() && a.Port() == b.Port()
}

// describe lists the addresses of ls for a message.
func describe(ls []Listener) string {
	if len(ls) == 0 {
		return "nothing"
	}
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = l.Addr.String()
	}
	return strings.Join(s, ", ")
}

// processListeners returns the listening TCP sockets of the tree rooted at
// pid, read from the procfs mounted at proc.
func processListeners(proc string, pid int) ([]Listener, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("no process (pid %d)", pid)
	}
	tree, err := processTree(proc, pid)
	if err != nil {
		return nil, err
	}
	owner := map[uint64]int{} // socket inode -> a pid holding it
	for _, p := range tree {
		if err := socketInodes(proc, p, p == pid, owner); err != nil {
			return nil, err
		}
	}
	var out []Listener
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join(proc, strconv.Itoa(pid), "net", table))
		if errors.Is(err, fs.ErrNotExist) && table == "tcp6" {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return nil, fmt.Errorf("read TCP sockets: %w", err)
		}
		socks, err := parseNetTCP(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read TCP sockets: %s: %w", f.Name(), err)
		}
		for _, s := range socks {
			if p, ok := owner[s.inode]; ok && s.state == tcpListen {
				out = append(out, Listener{Addr: s.local, PID: p, Inode: s.inode})
			}
		}
	}
	slices.SortFunc(out, func(a, b Listener) int { return a.Addr.Compare(b.Addr) })
	return out, nil
}

// socketInodes adds the socket inodes among the open files of process p
// (root: the tree's root, which must exist) to owner, each mapped to the
// first pid seen holding it.
func socketInodes(proc string, p int, root bool, owner map[uint64]int) error {
	ents, err := os.ReadDir(filepath.Join(proc, strconv.Itoa(p), "fd"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !root {
			return nil // a descendant that just exited
		}
		if errors.Is(err, fs.ErrPermission) {
			// Not root (or root without CAP_DAC_READ_SEARCH) and not
			// the process's user: the fds cannot even be listed.
			return &unreadableError{pid: p, err: err}
		}
		return fmt.Errorf("read the sockets of pid %d: %w", p, err)
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(proc, strconv.Itoa(p), "fd", e.Name()))
		if errors.Is(err, fs.ErrPermission) {
			// Listing the fds needs only file permissions, reading
			// one is ptrace access: root without CAP_SYS_PTRACE
			// (Docker drops it) sees another user's fds but not what
			// they are. Seeing no socket there is no proof of none.
			return &unreadableError{pid: p, err: err}
		}
		if err != nil {
			continue // closed meanwhile
		}
		if s, ok := strings.CutPrefix(target, "socket:["); ok {
			if ino, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				if _, seen := owner[ino]; !seen {
					owner[ino] = p
				}
			}
		}
	}
	return nil
}

// processTree returns pid and every live descendant of it and member of
// its process group, pid first; when pid is in a program cgroup of hbx's
// supervisor (progcgroup), that cgroup's members instead. It fails when
// pid does not exist.
func processTree(proc string, pid int) ([]int, error) {
	if _, err := os.Stat(filepath.Join(proc, strconv.Itoa(pid))); err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	if members, ok := progcgroup.Members(proc, pid); ok {
		// In a program cgroup of hbx's supervisor: its members are the
		// tree, also one that left the process group and was
		// reparented (a new session), and nothing else is.
		return members, nil
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	children := map[int][]int{}
	var group []int // the members of the process group pid leads
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(proc, e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		ppid, pgid, ok := parseStat(b)
		if !ok {
			continue
		}
		children[ppid] = append(children[ppid], p)
		if pgid == pid && p != pid {
			group = append(group, p)
		}
	}
	// A double-forked process leaves the tree (it is reparented to init
	// or the supervisor) but stays in the program's process group.
	tree := []int{pid}
	seen := map[int]bool{pid: true}
	for i := 0; i < len(tree); i++ {
		for _, c := range children[tree[i]] {
			if !seen[c] {
				seen[c] = true
				tree = append(tree, c)
			}
		}
		if i == 0 {
			for _, g := range group {
				if !seen[g] {
					seen[g] = true
					tree = append(tree, g)
				}
			}
		}
	}
	return tree, nil
}

// parseStat returns the ppid and pgrp fields of a /proc/<pid>/stat line:
// the second and fourth fields after the command name, which is in
// parentheses and may itself hold spaces and parentheses.
func parseStat(stat []byte) (ppid, pgid int, ok bool) {
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 3 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return ppid, pgid, true
}

// tcpListen is the st value of a listening socket in /proc/net/tcp
// (TCP_LISTEN in the kernel's tcp_states.h).
const tcpListen = 0x0A

// netTCPEntry is one row of /proc/net/tcp or tcp6.
type netTCPEntry struct {
	local netip.AddrPort
	state int
	inode uint64
}

// parseNetTCP parses /proc/net/tcp or /proc/net/tcp6: a header line, then
// rows "sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout
// inode ...". Addresses are hex words of 32 bits in host byte order, as
// the kernel prints them with %08X; ports are hex in host order.
func parseNetTCP(r io.Reader) ([]netTCPEntry, error) {
	sc := bufio.NewScanner(r)
	var out []netTCPEntry
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 10 {
			return nil, fmt.Errorf("short row %q", sc.Text())
		}
		local, err := parseHexAddrPort(f[1])
		if err != nil {
			return nil, fmt.Errorf("row %q: %w", sc.Text(), err)
		}
		st, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("row %q: state: %w", sc.Text(), err)
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("row %q: inode: %w", sc.Text(), err)
		}
		out = append(out, netTCPEntry{local: local, state: int(st), inode: ino})
	}
	return out, sc.Err()
}

// parseHexAddrPort parses "0100007F:12B4" (IPv4) or a 32-digit IPv6
// address and a port, as /proc/net/tcp{,6} print them.
func parseHexAddrPort(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q has no port", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q: %w", p, err)
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q is not 8 or 32 hex digits", a)
	}
	// Each 32-bit word was printed as a host-order integer: turn it back
	// into the bytes it was in memory, which are in network order.
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(addr, uint16(port)), nil
}
