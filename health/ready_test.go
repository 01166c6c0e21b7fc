package health

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestReady: only the readiness names are probes; mcp-tools without a key
// fails (a readiness that cannot run is not a pass).
func TestReady(t *testing.T) {
	for _, name := range []string{CheckWebUI, CheckListeners, "bogus"} {
		if _, err := Ready(Options{}, name); !errors.Is(err, ErrUnknownCheck) {
			t.Errorf("Ready(%q) = %v, want ErrUnknownCheck", name, err)
		}
	}
	probe, err := Ready(Options{Listen: "127.0.0.1", Port: 1}, ReadyMCPTools)
	if err != nil {
		t.Fatal(err)
	}
	if err := probe(context.Background()); !errors.Is(err, ErrNoKey) || !errors.Is(err, ErrUnhealthy) {
		t.Errorf("mcp-tools probe without a key = %v, want ErrNoKey and ErrUnhealthy", err)
	}
}

// TestReadyProcess: the supervisor's probe passes a healthy loopback
// payload whose listeners are all on loopback, fails without a pid and
// when the pid's tree listens off loopback, and asks mcp-tools for the
// names tools gives at each call.
func TestReadyProcess(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"status":"ok"}`))
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().(*net.TCPAddr)
	o := Options{Listen: "127.0.0.1", Port: addr.Port, Timeout: 5 * time.Second}
	probe, err := ReadyProcess(o, ReadyAPIHealth, nil)
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid() // this test process holds the server's listener
	if err := probe(t.Context(), self); err != nil {
		t.Errorf("probe of a healthy loopback server = %v, want nil", err)
	}
	o.KeyFile = filepath.Join(t.TempDir(), "gone.key") // needs no key: not judged by it
	if p, _ := ReadyProcess(o, ReadyAPIHealth, nil); p(t.Context(), self) != nil {
		t.Errorf("probe with a missing key file of a server that needs none = %v, want nil", p(t.Context(), self))
	}
	if err := probe(t.Context(), 0); !errors.Is(err, ErrUnhealthy) {
		t.Errorf("probe without a pid = %v, want ErrUnhealthy", err)
	}
	if _, err := ReadyProcess(o, CheckWebUI, nil); !errors.Is(err, ErrUnknownCheck) {
		t.Errorf("ReadyProcess(web-ui) = %v, want ErrUnknownCheck", err)
	}
	// A listener of the tree off loopback fails the probe, as in hbx health.
	exposed, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer exposed.Close()
	err = probe(t.Context(), self)
	if !errors.Is(err, ErrNotLoopback) || !strings.Contains(err.Error(), exposed.Addr().String()) {
		t.Errorf("probe with %s open = %v, want ErrNotLoopback naming it", exposed.Addr(), err)
	}
	// mcp-tools without a key fails before asking; tools is asked each call.
	asked := 0
	tp, err := ReadyProcess(Options{Listen: "127.0.0.1", Port: addr.Port}, ReadyMCPTools, func() []string { asked++; return []string{"execute"} })
	if err != nil {
		t.Fatal(err)
	}
	tp(t.Context(), self)
	tp(t.Context(), self)
	if err := tp(t.Context(), self); !errors.Is(err, ErrNoKey) || asked != 3 {
		t.Errorf("mcp-tools probe without a key = %v after %d asks of tools, want ErrNoKey after 3", err, asked)
	}
}

// TestReadyNetworkGate: exposed to the network, a payload whose /mcp
// answers without a key is never ready, whatever health.readiness names;
// on loopback the readiness alone decides, as before.
func TestReadyNetworkGate(t *testing.T) {
	gated := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/api/health":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"status":"ok"}`)
		case r.URL.Path == "/mcp" && gated:
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="x"`)
			w.WriteHeader(http.StatusUnauthorized)
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{}`)
		}
	}))
	defer srv.Close()
	ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
	o := Options{Listen: "0.0.0.0", Port: int(ap.Port())}
	for _, tt := range []struct {
		network, gated, ready bool
	}{
		{false, true, true},
		{false, false, true},
		{true, true, true},
		{true, false, false},
	} {
		gated = tt.gated
		o.Network = tt.network
		probe, err := Ready(o, ReadyAPIHealth)
		if err != nil {
			t.Fatal(err)
		}
		err = probe(context.Background())
		if (err == nil) != tt.ready || (err != nil && !errors.Is(err, ErrUnhealthy)) {
			t.Errorf("network %v, gated %v: api-health probe = %v, want ready %v", tt.network, tt.gated, err, tt.ready)
		}
	}
}

// TestReadyNotOffered: /api/health answering 404 or 405 means the payload
// does not offer it (the Executor CLI edition: 401 without its key, 404
// with it); readiness api-health then falls back to mcp-tools with a key
// configured, to the 401 Bearer challenge without one. A 200 "degraded",
// a 5xx and a timeout stay unhealthy; check api-health is skipped, naming
// the fallback.
func TestReadyNotOffered(t *testing.T) {
	const key = "k3y"
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	for _, name := range []string{"execute", "skills", "resume"} {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
	}
	mcpH := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	var health func(w http.ResponseWriter) // the /api/health answer of the case
	var gateAll, open bool                 // every path needs the key (the CLI edition); /mcp needs none
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gated := gateAll || r.URL.Path == "/mcp" && !open
		if gated && r.Header.Get("Authorization") != "Bearer "+key {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="x"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.URL.Path == "/mcp" {
			mcpH.ServeHTTP(w, r)
			return
		}
		health(w)
	}))
	defer srv.Close()
	ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
	status := func(code int, body string) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			io.WriteString(w, body)
		}
	}
	stall := func(http.ResponseWriter) { time.Sleep(2 * time.Second) }
	tools := []string{"execute", "skills", "resume"}
	for _, tt := range []struct {
		name       string
		health     func(http.ResponseWriter)
		key        bool
		keyFile    string   // health.token_file instead of the key
		open       bool     // /mcp answers without the key
		tools      []string // what mcp-tools expects
		want       string   // "" ready, else in the error
		checkSkips bool     // check api-health skips (not fails)
	}{
		{name: "404 with a key: mcp-tools", health: status(404, `{"error":"not found"}`), key: true, tools: tools, checkSkips: true},
		{name: "405 with a key: mcp-tools", health: status(405, ``), key: true, tools: tools, checkSkips: true},
		{name: "404 with a key, other tools", health: status(404, ``), key: true, tools: []string{"execute", "resume"},
			want: "readiness falls back to mcp-tools", checkSkips: true},
		{name: "404 without a key: the Bearer challenge", health: status(404, ``), checkSkips: true},
		{name: "404 without a key, /mcp open", health: status(404, ``), open: true, want: "readiness falls back to mcp-auth", checkSkips: true},
		{name: "200 degraded", health: status(200, `{"status":"degraded"}`), key: true, tools: tools, want: `status "degraded"`},
		{name: "503", health: status(503, `{"status":"unhealthy"}`), key: true, tools: tools, want: "503"},
		{name: "timeout", health: stall, key: true, tools: tools, want: "deadline"},
		{name: "404 with an unreadable key file", health: status(404, ``), keyFile: "/nonexistent/hbx.key", tools: tools,
			want: "/nonexistent/hbx.key", checkSkips: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			health, gateAll, open = tt.health, tt.key, tt.open
			o := Options{Listen: "127.0.0.1", Port: int(ap.Port()), Tools: tt.tools, Timeout: time.Second}
			if tt.key {
				o.Key = NewKey(key)
			}
			o.KeyFile = tt.keyFile
			probe, err := Ready(o, ReadyAPIHealth)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			err = probe(ctx)
			if tt.want == "" && err != nil {
				t.Errorf("api-health readiness = %v, want ready", err)
			}
			if tt.want != "" && (!errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("api-health readiness = %v, want ErrUnhealthy saying %q", err, tt.want)
			}
			rep, err := Run(t.Context(), o, []string{CheckAPIHealth})
			if err != nil {
				t.Fatal(err)
			}
			got := rep.Checks[0]
			if tt.checkSkips && (got.Status != Skip || !strings.Contains(got.Reason, "not offered") || !strings.Contains(got.Reason, "readiness falls back to "+o.fallback())) {
				t.Errorf("check api-health = %s %q, want a skip naming the fallback", got.Status, got.Reason)
			}
			if !tt.checkSkips && got.Status != Fail {
				t.Errorf("check api-health = %s %q, want fail", got.Status, got.Reason)
			}
		})
	}
}
