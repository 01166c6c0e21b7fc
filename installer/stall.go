package installer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"sync"
	"time"
)

// ErrStalled: a registry request received no byte for
// RegistryOptions.StallTimeout while hbx was waiting for one.
var ErrStalled = errors.New("stalled")

// stallChecks is how many times per stall timeout the watchdog looks.
const stallChecks = 8

// attempt is one try at one registry request (open and index, manifest,
// config or layer): its own context, cancelled when the attempt ends, and a
// watchdog that cancels it with a cause wrapping ErrStalled when a call
// waiting on the network sees no progress for the stall timeout.
//
// Progress is any of: a body Read that returned bytes; an HTTP trace event
// (name resolved, connected, TLS handshake done, connection ready, request
// written, first response byte); a change in the kernel's count of bytes
// received on a connection the attempt used (Linux, see bytesReceived). The
// last covers what the image library reads itself (the /v2/ ping, bearer
// tokens, manifest bodies), so a manifest that trickles in is not killed
// for being slow. Time spent outside begin/end (the consumer busy writing
// or extracting) never counts as a stall.
type attempt struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	timeout time.Duration // 0: no watchdog
	stop    chan struct{}
	once    sync.Once

	mu      sync.Mutex
	waiting int       // calls blocked on the network
	last    time.Time // last progress, or when waiting began
	conns   []net.Conn
	seen    uint64 // bytes received on conns at the last check
}

// startAttempt derives an attempt from parent. With timeout > 0 it watches
// for stalls until finish is called.
func startAttempt(parent context.Context, timeout time.Duration) *attempt {
	a := &attempt{timeout: timeout, stop: make(chan struct{})}
	ctx, cancel := context.WithCancelCause(parent)
	a.cancel = cancel
	if timeout <= 0 {
		a.ctx = ctx
		return a
	}
	a.last = time.Now()
	a.ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(ci httptrace.GotConnInfo) {
			a.mu.Lock()
			a.conns = append(a.conns, ci.Conn)
			a.mu.Unlock()
			a.progress()
		},
		DNSDone:              func(httptrace.DNSDoneInfo) { a.progress() },
		ConnectDone:          func(string, string, error) { a.progress() },
		TLSHandshakeDone:     func(tls.ConnectionState, error) { a.progress() },
		WroteRequest:         func(httptrace.WroteRequestInfo) { a.progress() },
		GotFirstResponseByte: a.progress,
	})
	go a.watch()
	return a
}

// begin marks a call that waits on the network; end closes it, noting
// progress when the call delivered something.
func (a *attempt) begin() {
	a.mu.Lock()
	if a.waiting == 0 {
		a.last = time.Now()
	}
	a.waiting++
	a.mu.Unlock()
}

func (a *attempt) end(progressed bool) {
	a.mu.Lock()
	a.waiting--
	if progressed {
		a.last = time.Now()
	}
	a.mu.Unlock()
}

func (a *attempt) progress() {
	a.mu.Lock()
	a.last = time.Now()
	a.mu.Unlock()
}

func (a *attempt) watch() {
	tick := time.NewTicker(max(a.timeout/stallChecks, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-a.ctx.Done():
			return
		case now := <-tick.C:
			if a.stalled(now) {
				a.cancel(fmt.Errorf("no bytes for %v (%w)", a.timeout, ErrStalled))
				return
			}
		}
	}
}

func (a *attempt) stalled(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	var sum uint64
	for _, c := range a.conns {
		if n, ok := bytesReceived(c); ok {
			sum += n
		}
	}
	if sum != a.seen {
		a.seen, a.last = sum, now
	}
	return a.waiting > 0 && now.Sub(a.last) >= a.timeout
}

// finish ends the attempt and returns err, replaced by the stall when the
// watchdog cancelled the attempt: what the library reports then ("context
// canceled") is a consequence, not the cause.
func (a *attempt) finish(err error) error {
	if err != nil {
		if cause := context.Cause(a.ctx); errors.Is(cause, ErrStalled) {
			err = cause
		}
	}
	a.once.Do(func() {
		close(a.stop)
		a.cancel(nil)
	})
	return err
}
