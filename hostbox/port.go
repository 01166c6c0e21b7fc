// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
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

// rootLockWait bounds how long a New waits for another New of the root
// to write its .env (a few file writes; a busy machine gets a minute).
const rootLockWait = time.Minute

// lockRoot takes the flock of the root directory itself (no lock file:
// none is left behind, and a New that made the root can remove it), and
// returns its idempotent release. It waits up to rootLockWait.
func lockRoot(ctx context.Context, root string) (func(), error) {
	f, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("lock the box root: %w", err)
	}
	deadline := time.Now().Add(rootLockWait)
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return sync.OnceFunc(func() { f.Close() }), nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) || ctx.Err() != nil {
			f.Close()
			return nil, fmt.Errorf("lock the box root %s (another hbx box new or load is writing a box there): %w", root, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// claimPort checks again, under the root's lock, that no box of the
// root holds b's port (another New may have claimed it since checkNew
// chose it): a chosen port is chosen again, one given with --port is
// refused (ErrInvalid).
func claimPort(b *Box, o NewOptions) error {
	others, err := List(o.Root)
	if err != nil {
		return err
	}
	name, taken := claimed(others)[b.Port()]
	if !taken {
		return nil
	}
	if !o.portChosen {
		return fmt.Errorf("new box %s: port %d: box %s holds it: %w", o.Name, b.Port(), name, ErrInvalid)
	}
	p, err := ChoosePort(o.BindAddress, others)
	if err != nil {
		return fmt.Errorf("new box %s: %w", o.Name, err)
	}
	b.Env = b.Env.Set("HOST_PORT", strconv.Itoa(p))
	return nil
}
