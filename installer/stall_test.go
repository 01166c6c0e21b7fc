package installer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"go.podman.io/image/v5/docker"
)

// TestAttemptWatchdog: the watchdog cancels an attempt whose call waits
// without progress for the timeout, never one that progresses more often,
// and never counts time spent outside a call.
func TestAttemptWatchdog(t *testing.T) {
	const timeout = 150 * time.Millisecond
	cases := []struct {
		name      string
		timeout   time.Duration
		run       func(a *attempt) // returns when done or cancelled
		wantStall bool
	}{
		{name: "blocked call", timeout: timeout, wantStall: true, run: func(a *attempt) {
			a.begin()
			<-a.ctx.Done()
			a.end(false)
		}},
		{name: "progress more often than the timeout", timeout: timeout, run: func(a *attempt) {
			for range 8 {
				a.begin()
				select {
				case <-a.ctx.Done():
				case <-time.After(timeout / 4):
				}
				a.end(true)
			}
		}},
		{name: "consumer busy between calls", timeout: timeout, run: func(a *attempt) {
			for range 3 {
				a.begin()
				a.end(true)
				time.Sleep(3 * timeout / 2)
			}
		}},
		{name: "trace progress inside one call", timeout: timeout, run: func(a *attempt) {
			a.begin()
			for range 8 {
				time.Sleep(timeout / 4)
				a.progress()
			}
			a.end(true)
		}},
		{name: "no watchdog", run: func(a *attempt) {
			a.begin()
			time.Sleep(2 * timeout)
			a.end(false)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := startAttempt(context.Background(), c.timeout)
			start := time.Now()
			c.run(a)
			err := a.finish(errors.New("call failed"))
			if got := errors.Is(err, ErrStalled); got != c.wantStall {
				t.Fatalf("finish() = %v; stalled %v, want %v", err, got, c.wantStall)
			}
			if c.wantStall {
				if took := time.Since(start); took < timeout {
					t.Errorf("stalled after %v, want at least %v", took, timeout)
				}
				if want := fmt.Sprintf("no bytes for %v (stalled)", timeout); err.Error() != want {
					t.Errorf("finish() = %q, want %q", err, want)
				}
			}
			if a.ctx.Err() == nil {
				t.Error("the attempt's context is live after finish")
			}
		})
	}
}

// TestAttemptParentCancelled: cancelling the parent is not a stall.
func TestAttemptParentCancelled(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	a := startAttempt(parent, time.Hour)
	a.begin()
	cancel()
	<-a.ctx.Done()
	a.end(false)
	if err := a.finish(context.Canceled); !errors.Is(err, context.Canceled) || errors.Is(err, ErrStalled) {
		t.Errorf("finish() = %v, want context.Canceled", err)
	}
}

// TestTransient is the retry classification.
func TestTransient(t *testing.T) {
	urlErr := func(err error) error { return &url.Error{Op: "Get", URL: "http://127.0.0.1:5000/v2/", Err: err} }
	cases := []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("no bytes for 30s (%w)", ErrStalled), true},
		{urlErr(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true},
		{urlErr(io.EOF), true},
		{fmt.Errorf("reading blob: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("fetching blob: %w", docker.UnexpectedHTTPStatusError{StatusCode: 503}), true},
		{fmt.Errorf("fetching blob: %w", docker.UnexpectedHTTPStatusError{StatusCode: 500}), true},
		{docker.ErrTooManyRequests, true},
		{urlErr(&net.DNSError{Err: "server misbehaving", IsTemporary: true}), true},
		{urlErr(&net.DNSError{Err: "no such host", IsNotFound: true}), false},
		{fmt.Errorf("%w: content does not hash to sha256:ab", ErrDigestMismatch), false},
		{fmt.Errorf("%w: registry sends 3 bytes (Content-Length): %w", ErrDigestMismatch, io.ErrUnexpectedEOF), false},
		{errors.New("reading manifest sha256:ab in 127.0.0.1/x: manifest unknown"), false},
		{docker.ErrUnauthorizedForCredentials{Err: errors.New("denied")}, false},
		{context.Canceled, false},
	}
	for _, c := range cases {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestBackoff: the waits between attempts double from Backoff up to the cap.
func TestBackoff(t *testing.T) {
	r := &remote{opts: RegistryOptions{Backoff: 10 * time.Millisecond, Retries: 3, StallTimeout: 0}, log: slog.New(slog.DiscardHandler)}
	tr := retrier{r: r, what: "blob"}
	var waits []time.Duration
	for range 4 {
		start := time.Now()
		a, err := tr.start(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		a.finish(nil)
		waits = append(waits, time.Since(start))
	}
	for i, min := range []time.Duration{0, 10, 20, 40} {
		if waits[i] < min*time.Millisecond {
			t.Errorf("wait before attempt %d = %v, want at least %v", i+1, waits[i], min*time.Millisecond)
		}
	}
	if err := tr.fail(context.Background(), io.ErrUnexpectedEOF); err == nil || err.Error() != "after 4 attempts: unexpected EOF" {
		t.Errorf("fail() after the last attempt = %v, want %q", err, "after 4 attempts: unexpected EOF")
	}
}
