package main

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when the bucket sleeps.
type fakeClock struct {
	t     time.Time
	slept time.Duration
}

func (c *fakeClock) now() time.Time { return c.t }
func (c *fakeClock) sleep(d time.Duration) {
	c.slept += d
	c.t = c.t.Add(d)
}

func fakeBucket(rate float64, burst int) (*bucket, *fakeClock) {
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	b := newBucket(rate, burst)
	b.now, b.sleep = c.now, c.sleep
	b.last = c.t
	return b, c
}

// TestBucketAccounts: the bucket counts every byte it is charged and makes
// a reader wait exactly what the rate implies beyond the burst; an idle
// bucket refills to its burst and no further. Time is a fake clock that
// moves only when the bucket sleeps: no assertion depends on the machine.
func TestBucketAccounts(t *testing.T) {
	const burst = 64 << 10
	var rate float64 = 1 << 20
	b, c := fakeBucket(rate, burst)
	for range 32 {
		b.Take(32 << 10)
	}
	b.Take(0)
	if got := b.Served(); got != 1<<20 {
		t.Errorf("Served() = %d after 1 MiB, want %d", got, 1<<20)
	}
	want := time.Duration(float64(1<<20-burst) / rate * float64(time.Second))
	if d := c.slept - want; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("slept %v for 1 MiB at 1 MiB/s with a 64 KiB burst, want %v", c.slept, want)
	}

	// Ten idle seconds refill the burst only: a burst passes without
	// waiting, the next byte waits.
	c.t = c.t.Add(10 * time.Second)
	before := c.slept
	b.Take(burst)
	if c.slept != before {
		t.Errorf("a burst after an idle period slept %v, want none", c.slept-before)
	}
	b.Take(1024)
	if got, want := c.slept-before, time.Duration(1024.0/rate*float64(time.Second)); got < want-time.Microsecond || got > want+time.Microsecond {
		t.Errorf("1 KiB past the burst slept %v, want %v", got, want)
	}
	if got := b.Served(); got != 1<<20+burst+1024 {
		t.Errorf("Served() = %d, want %d", got, 1<<20+burst+1024)
	}
}

// TestProxyPassesBytes: bodies reach the client unchanged through the
// proxy, with status and headers, and /-/stats counts the bytes served, the
// requests and the blob GETs.
func TestProxyPassesBytes(t *testing.T) {
	body := make([]byte, 3<<20+17)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v2/bench/app/blobs/sha256:00":
			w.Header().Set("Docker-Content-Digest", "sha256:00")
			w.Write(body)
		case "/v2/":
			w.Write([]byte("{}"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer up.Close()
	p, err := newProxy(strings.TrimPrefix(up.URL, "http://"), newBucket(1e12, 64<<10))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()

	get := func(path string) (*http.Response, []byte) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	resp, got := get("/v2/bench/app/blobs/sha256:00")
	if resp.StatusCode != 200 || !bytes.Equal(got, body) || resp.Header.Get("Docker-Content-Digest") != "sha256:00" {
		t.Errorf("GET blob through the proxy: status %d, %d bytes (equal %v), digest header %q; want 200 and the %d bytes unchanged",
			resp.StatusCode, len(got), bytes.Equal(got, body), resp.Header.Get("Docker-Content-Digest"), len(body))
	}
	if _, got := get("/v2/"); string(got) != "{}" {
		t.Errorf("GET /v2/ through the proxy = %q, want {}", got)
	}
	if resp, _ := get("/v2/missing"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET of a missing path = %d, want 404", resp.StatusCode)
	}
	_, stats := get("/-/stats")
	notFound := len("404 page not found\n")
	if want := "bytes=" + strconv.Itoa(len(body)+2+notFound) + " requests=3 blob_gets=1\n"; string(stats) != want {
		t.Errorf("/-/stats = %q, want %q", stats, want)
	}
}
