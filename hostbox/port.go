// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"fmt"
	"net"
	"strconv"
)

// FirstPort is where ChoosePort starts: Executor's own port; the boxes of
// a root count up from it.
const FirstPort = 4788

// lastPort bounds ChoosePort's search (below Linux's ephemeral range, so a
// chosen port is not one the kernel hands out to outgoing connections).
const lastPort = 32767

// claimed is the set of host ports the root's boxes hold (running or not).
func claimed(boxes []Box) map[int]string {
	m := map[int]string{}
	for _, b := range boxes {
		if p := b.Port(); p != 0 {
			m[p] = b.Name
		}
	}
	return m
}

// CheckPort refuses a port out of 1..65535, one another box of the root
// holds, or one a program listens on at addr now. Errors wrap ErrInvalid.
func CheckPort(addr string, port int, boxes []Box) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d: want 1 to 65535: %w", port, ErrInvalid)
	}
	if name, ok := claimed(boxes)[port]; ok {
		return fmt.Errorf("port %d: box %s holds it: %w", port, name, ErrInvalid)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("port %d on %s is in use: %w", port, addr, ErrInvalid)
	}
	return l.Close()
}

// ChoosePort returns the first port from FirstPort up that no box of the
// root holds and nothing listens on at addr.
func ChoosePort(addr string, boxes []Box) (int, error) {
	for p := FirstPort; p <= lastPort; p++ {
		if CheckPort(addr, p, boxes) == nil {
			return p, nil
		}
	}
	return 0, fmt.Errorf("choose a port on %s: none free from %d to %d", addr, FirstPort, lastPort)
}
