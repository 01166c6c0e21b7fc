package health

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
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
