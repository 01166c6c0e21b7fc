package installer

import (
	"crypto/tls"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// bytesReceived returns the kernel's count of bytes received on c's TCP
// socket (TCP_INFO tcpi_bytes_received, Linux 4.1+), seeing through TLS.
// ok is false when c is not a TCP socket or is closed.
func bytesReceived(c net.Conn) (n uint64, ok bool) {
	if tc, isTLS := c.(*tls.Conn); isTLS {
		c = tc.NetConn()
	}
	sc, isSys := c.(syscall.Conn)
	if !isSys {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	cerr := raw.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil {
			n, ok = info.Bytes_received, true
		}
	})
	return n, ok && cerr == nil
}
