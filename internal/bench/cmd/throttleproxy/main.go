// Command throttleproxy is the bandwidth-limited link of the upgrade
// benchmark (scripts/upgradebench.sh): a plain HTTP reverse proxy on
// 127.0.0.1 in front of a registry whose response bodies all share one
// token bucket, so every connection together gets at most -rate bytes a
// second (about a good home link at the default 20 MB/s).
//
//	throttleproxy -upstream HOST:PORT [-listen 127.0.0.1:0] [-rate 20000000] [-burst 65536]
//
// It prints "addr=HOST:PORT" once it listens and serves until SIGINT or
// SIGTERM. GET /-/stats (not proxied, not counted) answers
// "bytes=N requests=M blob_gets=K": the response body bytes it has served,
// the requests it has proxied and, of those, the GETs of /v2/.../blobs/.
// Request bodies pass unlimited (the benchmark only pulls through it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "throttleproxy: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("throttleproxy", flag.ContinueOnError)
	upstream := fs.String("upstream", "", "registry to proxy, HOST:PORT (plain HTTP)")
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	rate := fs.Float64("rate", 20e6, "bytes a second, shared by every connection")
	burst := fs.Int("burst", 64<<10, "bytes the bucket holds when idle")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *upstream == "" {
		return errors.New("-upstream is required")
	}
	if *rate <= 0 || *burst <= 0 {
		return fmt.Errorf("-rate %g, -burst %d: want both positive", *rate, *burst)
	}
	p, err := newProxy(*upstream, newBucket(*rate, *burst))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	fmt.Fprintf(stdout, "addr=%s\n", ln.Addr())
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// proxy forwards every request but /-/stats to the upstream, its response
// bodies read through one bucket.
type proxy struct {
	rp       *httputil.ReverseProxy
	b        *bucket
	requests atomic.Int64
	blobGets atomic.Int64
}

func newProxy(upstream string, b *bucket) (*proxy, error) {
	u, err := url.Parse("http://" + upstream)
	if err != nil || u.Host != upstream {
		return nil, fmt.Errorf("parse upstream %q: want HOST:PORT", upstream)
	}
	p := &proxy{b: b}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Body = &limitedBody{rc: resp.Body, b: b}
			return nil
		},
	}
	return p, nil
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/-/stats" {
		fmt.Fprintf(w, "bytes=%d requests=%d blob_gets=%d\n", p.b.Served(), p.requests.Load(), p.blobGets.Load())
		return
	}
	p.requests.Add(1)
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v2/") && strings.Contains(r.URL.Path, "/blobs/sha256:") {
		p.blobGets.Add(1)
	}
	p.rp.ServeHTTP(w, r)
}

// limitedBody reads at most chunk bytes at a time and charges each read to
// the bucket before returning it.
type limitedBody struct {
	rc io.ReadCloser
	b  *bucket
}

const chunk = 32 << 10

func (l *limitedBody) Read(p []byte) (int, error) {
	if len(p) > chunk {
		p = p[:chunk]
	}
	n, err := l.rc.Read(p)
	l.b.Take(n)
	return n, err
}

func (l *limitedBody) Close() error { return l.rc.Close() }

// bucket is a token bucket shared by all connections: it refills at rate
// bytes a second up to burst bytes. Take charges n bytes at once (the
// balance may go negative) and sleeps until the balance is back at zero,
// so concurrent takers queue behind one another's debt and the sum of
// their throughput stays at rate.
type bucket struct {
	rate  float64 // bytes a second
	burst float64 // bytes

	now   func() time.Time    // time.Now, or a test's clock
	sleep func(time.Duration) // time.Sleep, or a test's

	mu     sync.Mutex
	tokens float64 // bytes; negative is debt
	last   time.Time
	served int64 // bytes charged so far
}

func newBucket(rate float64, burst int) *bucket {
	b := &bucket{rate: rate, burst: float64(burst), now: time.Now, sleep: time.Sleep}
	b.tokens, b.last = b.burst, b.now()
	return b
}

// Take charges n bytes and blocks until the link has carried them.
func (b *bucket) Take(n int) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	t := b.now()
	b.tokens = min(b.burst, b.tokens+t.Sub(b.last).Seconds()*b.rate)
	b.last = t
	b.tokens -= float64(n)
	b.served += int64(n)
	debt := -b.tokens
	b.mu.Unlock()
	if debt > 0 {
		b.sleep(time.Duration(debt / b.rate * float64(time.Second)))
	}
}

// Served is the number of bytes charged so far.
func (b *bucket) Served() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.served
}
