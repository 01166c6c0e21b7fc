// SPDX-License-Identifier: Apache-2.0

package docker

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDockerEgress: with deploy/compose.egress.yaml the box is healthy,
// the host reaches the published port and the agent its executor; the
// agent is on the internal box network only and cannot dial out (a
// package registry's address), while the executor, also on the egress
// network, can.
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
	if got := b.inspect("executor", "{{range $n, $_ := .NetworkSettings.Networks}}{{$n}} {{end}}"); !strings.Contains(got, b.project+"_egress") {
		t.Errorf("executor's networks: %s, want %s_egress among them", got, b.project)
	}
	if got := b.inspect("agent", "{{range $n, $_ := .NetworkSettings.Networks}}{{$n}} {{end}}"); strings.TrimSpace(got) != b.project+"_box" {
		t.Errorf("agent's networks: %s, want only %s_box", got, b.project)
	}
	internal, err := run(t.Context(), "", nil, "network", "inspect", "--format", "{{.Internal}}", b.project+"_box")
	if err != nil || strings.TrimSpace(internal) != "true" {
		t.Errorf("network %s_box internal = %q, %v; want true", b.project, internal, err)
	}
	// Outbound: a package registry (the one address this machine is
	// promised to reach), dialled by IP from both containers.
	addrs, err := net.DefaultResolver.LookupHost(t.Context(), "deb.debian.org")
	if err != nil || len(addrs) == 0 {
		t.Fatalf("resolve deb.debian.org on the host (the package registry this machine reaches): %v", err)
	}
	ip := ""
	for _, a := range addrs {
		if net.ParseIP(a).To4() != nil {
			ip = a
			break
		}
	}
	if ip == "" {
		t.Fatalf("deb.debian.org has no IPv4 address: %v", addrs)
	}
	addr := net.JoinHostPort(ip, "80")
	if out, err := b.execErr("executor", "timeout", "20", "bash", "-c", "exec 3<>/dev/tcp/"+ip+"/80 && echo connected"); err != nil || !strings.Contains(out, "connected") {
		t.Errorf("executor dial %s (outbound, through egress): %q, %v; want connected", addr, out, err)
	}
	if out, err := b.execErr("agent", "agentprobe", "dial", addr); err == nil {
		t.Errorf("agent dial %s (outbound) = %q, want it to fail: the agent's network is internal", addr, out)
	}
}
