// SPDX-License-Identifier: Apache-2.0

package registrytest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Kind selects requests by what they ask the distribution API for.
type Kind int

// Request kinds.
const (
	Any      Kind = iota
	Ping          // GET /v2/
	Manifest      // /v2/<name>/manifests/<reference>
	Blob          // /v2/<name>/blobs/<digest>
)

func kindOf(path string) Kind {
	switch {
	case path == "/v2/" || path == "/v2":
		return Ping
	case strings.Contains(path, "/manifests/"):
		return Manifest
	case strings.Contains(path, "/blobs/"):
		return Blob
	}
	return Any
}

// Rule picks requests and the fault their responses get. A request matches
// when its kind is Kind (Any matches all) and its URL path ends with Path
// ("" matches all): "/blobs/sha256:ab…" is one blob, "sha256:ab…" a blob or
// manifest by digest, "/v2/" only the ping.
type Rule struct {
	Kind  Kind
	Path  string
	Times int // how many matching requests get the fault; 0 means every one
	Fault Fault
}

// Fault is what happens to a selected response. Make one with the
// functions below.
type Fault struct {
	kind   faultKind
	n      int64
	status int
	every  time.Duration
	path   string
	edit   func([]byte) []byte
}

type faultKind int

const (
	faultNone faultKind = iota
	faultHang
	faultStall
	faultReset
	faultCut
	faultStatus
	faultDrip
	faultEdit
	faultServe
)

func (f Fault) String() string {
	switch f.kind {
	case faultHang:
		return "hang"
	case faultStall:
		return fmt.Sprintf("stall after %d bytes", f.n)
	case faultReset:
		return fmt.Sprintf("reset after %d bytes", f.n)
	case faultCut:
		return fmt.Sprintf("cut after %d bytes", f.n)
	case faultStatus:
		return fmt.Sprintf("status %d", f.status)
	case faultDrip:
		return fmt.Sprintf("drip %d bytes every %v", f.n, f.every)
	case faultEdit:
		return "edited body"
	case faultServe:
		return "serve " + f.path
	}
	return "none"
}

// Hang accepts the request and never answers: no status line, no byte.
func Hang() Fault { return Fault{kind: faultHang} }

// StallAfter sends the headers and the first n bytes of the body, then
// nothing more while the connection stays open.
func StallAfter(n int64) Fault { return Fault{kind: faultStall, n: n} }

// ResetAfter sends the headers and the first n bytes of the body, then
// resets the connection (TCP RST).
func ResetAfter(n int64) Fault { return Fault{kind: faultReset, n: n} }

// CutAfter sends the headers, with the upstream Content-Length, and the
// first n bytes of the body, then closes the connection cleanly: a body
// truncated in flight.
func CutAfter(n int64) Fault { return Fault{kind: faultCut, n: n} }

// Status answers status with a distribution error body instead of
// forwarding the request.
func Status(status int) Fault { return Fault{kind: faultStatus, status: status} }

// Drip sends the body n bytes at a time, every interval: slow but moving.
func Drip(n int64, every time.Duration) Fault { return Fault{kind: faultDrip, n: n, every: every} }

// Edit serves edit(body) instead of the upstream body, with a
// Content-Length that matches what is sent: a registry that lies
// consistently (other bytes, fewer, or more).
func Edit(edit func(body []byte) []byte) Fault { return Fault{kind: faultEdit, edit: edit} }

// Serve answers with what the upstream serves at path (a full URL path,
// "/v2/<name>/manifests/sha256:…") instead: a manifest served for another
// digest.
func Serve(path string) Fault { return Fault{kind: faultServe, path: path} }

// Proxy is a fault-injecting HTTP proxy in front of one registry; see
// [NewProxy]. It is safe for concurrent use.
type Proxy struct {
	t         testing.TB
	upstream  string // http://host:port
	host      string
	srv       *http.Server
	client    *http.Client
	closing   chan struct{}
	closeOnce sync.Once

	mu    sync.Mutex
	rules []*Rule
	log   []Request
}

// Request is one request the proxy received and the fault it applied.
type Request struct {
	Method, Path string
	Fault        string // "none" when passed through
}

// NewProxy starts a proxy on 127.0.0.1 in front of upstream (a base URL,
// "http://127.0.0.1:5000"), stopped in t.Cleanup. Requests go upstream
// with the same method, path, query and headers; answers come back with
// the same status and headers and the body streamed through, unless a Rule
// selects the request.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("NewProxy: %v", err)
	}
	p := &Proxy{
		t:        t,
		upstream: strings.TrimSuffix(upstream, "/"),
		host:     l.Addr().String(),
		closing:  make(chan struct{}),
		client: &http.Client{
			// Bodies pass through as sent: no transparent gzip, no proxy
			// from the environment, no redirects followed.
			Transport: &http.Transport{DisableCompression: true, Proxy: nil},
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(l)
	t.Cleanup(p.Close)
	return p
}

// Host returns the proxy's address, "127.0.0.1:PORT", to use in image
// references in place of the registry's.
func (p *Proxy) Host() string { return p.host }

// Add appends rules; the first matching rule with uses left applies.
func (p *Proxy) Add(rules ...Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range rules {
		r := rules[i]
		p.rules = append(p.rules, &r)
	}
}

// Clear removes every rule: from now on everything passes through.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Requests returns what the proxy received so far, in order.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.log...)
}

// Count returns how many requests of kind k (Any for all) whose path ends
// with suffix the proxy received.
func (p *Proxy) Count(k Kind, suffix string) int {
	n := 0
	for _, r := range p.Requests() {
		if (k == Any || kindOf(r.Path) == k) && strings.HasSuffix(r.Path, suffix) {
			n++
		}
	}
	return n
}

// Close stops the proxy, ending stalled responses. It is safe to call
// more than once.
func (p *Proxy) Close() {
	p.closeOnce.Do(func() {
		close(p.closing)
		p.srv.Close()
		p.client.CloseIdleConnections()
	})
}

// take returns the fault for req and counts its use.
func (p *Proxy) take(req *http.Request) Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := Fault{}
	for _, r := range p.rules {
		if (r.Kind != Any && r.Kind != kindOf(req.URL.Path)) || !strings.HasSuffix(req.URL.Path, r.Path) {
			continue
		}
		if r.Times < 0 {
			continue // used up
		}
		if r.Times > 0 {
			r.Times--
			if r.Times == 0 {
				r.Times = -1
			}
		}
		f = r.Fault
		break
	}
	p.log = append(p.log, Request{Method: req.Method, Path: req.URL.Path, Fault: f.String()})
	return f
}

// hopHeaders are connection-level headers a proxy does not forward.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *Proxy) serve(w http.ResponseWriter, req *http.Request) {
	f := p.take(req)
	switch f.kind {
	case faultHang:
		p.wait(req.Context())
		return
	case faultStatus:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, `{"errors":[{"code":"UNAVAILABLE","message":"registrytest: injected status %d"}]}`+"\n", f.status)
		return
	}
	path := req.URL.Path
	if f.kind == faultServe {
		path = f.path
	}
	target := p.upstream + path
	if req.URL.RawQuery != "" {
		target += "?" + req.URL.RawQuery
	}
	out, err := http.NewRequestWithContext(req.Context(), req.Method, target, req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = req.Header.Clone()
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.ContentLength = req.ContentLength
	resp, err := p.client.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	body := io.Reader(resp.Body)
	if f.kind == faultEdit {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		b = f.edit(b)
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		body = bytes.NewReader(b)
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	switch f.kind {
	case faultStall:
		if copyN(w, body, f.n) == nil {
			rc.Flush()
			p.wait(req.Context())
		}
	case faultReset, faultCut:
		if copyN(w, body, f.n) != nil {
			return
		}
		rc.Flush()
		conn, _, err := rc.Hijack()
		if err != nil {
			p.t.Errorf("registrytest: hijack for %s: %v", f, err)
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok && f.kind == faultReset {
			tc.SetLinger(0) // close sends RST
		}
		conn.Close()
	case faultDrip:
		for {
			err := copyN(w, body, f.n)
			rc.Flush()
			if err != nil {
				return
			}
			select {
			case <-req.Context().Done():
				return
			case <-p.closing:
				return
			case <-time.After(f.every):
			}
		}
	default:
		io.Copy(w, body)
	}
}

// copyN copies n bytes, or up to the end of src. It returns io.EOF when
// src ended first.
func copyN(w io.Writer, src io.Reader, n int64) error {
	k, err := io.CopyN(w, src, n)
	if err == nil && k == n {
		return nil
	}
	if err == nil {
		err = io.EOF
	}
	return err
}

// wait blocks until the client goes away or the proxy closes.
func (p *Proxy) wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-p.closing:
	}
}
