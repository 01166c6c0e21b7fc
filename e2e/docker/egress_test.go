// SPDX-License-Identifier: Apache-2.0

package docker

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDockerEgress: with deploy/compose.egress.yaml the box is healthy,
// the host reaches the published port and the agent its executor, but the
// agent reaches nothing off its internal network (a listener on the host,
// through the egress network's gateway), while the executor does.
func TestDockerEgress(t *testing.T) {
	s := requireDocker(t)
	egress, err := os.ReadFile(filepath.Join(s.root, "deploy/compose.egress.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b := s.newBox(t, "egress", boxOptions{override: string(egress)})
	b.upWait()
	if code, body := b.hostGet("/api/health"); code != 200 {
		t.Errorf("host GET /api/health on the published port = %d %q, want 200", code, body)
	}
	if out := b.exec("agent", "agentprobe", "mcp", "http://executor:4788/mcp", "/run/secrets/mcp_key"); !strings.Contains(out, "tools=execute,resume\n") {
		t.Errorf("agent MCP with the key: %q, want the two tools", out)
	}
	// A listener on the host, reached through the egress network's gateway.
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	gw, err := run(t.Context(), "", nil, "network", "inspect", "--format", "{{range .IPAM.Config}}{{.Gateway}}{{end}}", b.project+"_egress")
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(strings.TrimSpace(gw), strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	if out, err := b.execErr("executor", "bash", "-c", "exec 3<>/dev/tcp/"+strings.Replace(addr, ":", "/", 1)+" && echo connected"); err != nil || !strings.Contains(out, "connected") {
		t.Errorf("executor dial %s (the host, through egress): %q, %v; want connected", addr, out, err)
	}
	if out, err := b.execErr("agent", "agentprobe", "dial", addr); err == nil {
		t.Errorf("agent dial %s (the host) = %q, want it refused: the agent's network is internal", addr, out)
	}
}
