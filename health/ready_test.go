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
