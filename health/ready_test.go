package health

import (
	"context"
	"errors"
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
