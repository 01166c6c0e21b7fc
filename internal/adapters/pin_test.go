package adapters

import (
	"slices"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/upgrade"
)

var (
	testOldRel = upgrade.Release{Target: release.Target{Image: "r/e:v1@" + string(digest.FromString("i1")), Platform: "linux/amd64", IndexDigest: digest.FromString("i1"), ManifestDigest: digest.FromString("m1")}}
	testNewRel = upgrade.Release{Target: release.Target{Image: "r/e:v2@" + string(digest.FromString("i2")), Platform: "linux/amd64", IndexDigest: digest.FromString("i2"), ManifestDigest: digest.FromString("m2")}}
)

// TestGateChecks: the checks that gate a change, mcp-tools only with a
// key and never twice.
func TestGateChecks(t *testing.T) {
	d := config.Defaults()
	c := &d
	base := []string{c.Health.Readiness, "mcp-auth", "supervisor", "release"}
	if got := gateChecks(c); !slices.Equal(got, base) {
		t.Errorf("without a key: %v, want %v", got, base)
	}
	c.Health.TokenFile = "/k"
	if got := gateChecks(c); !slices.Equal(got, append(slices.Clone(base), "mcp-tools")) {
		t.Errorf("with a key: %v, want mcp-tools last", got)
	}
	c.Health.Readiness = "mcp-tools"
	if got := gateChecks(c); !slices.Equal(got, []string{"mcp-tools", "mcp-auth", "supervisor", "release"}) {
		t.Errorf("readiness mcp-tools: %v, want it once", got)
	}
}

// TestToolsInAndPinned: the tool set in force once r is pinned, and the
// configuration with r pinned, leaving cfg as it was.
func TestToolsInAndPinned(t *testing.T) {
	d := config.Defaults()
	c := &d
	c.Health.MCPTools = []string{"execute"}
	for _, tc := range []struct {
		name       string
		tools      *upgrade.Tools
		overridden bool
		want       []string
	}{
		{"not recorded", nil, false, []string{"execute"}},
		{"recorded default", &upgrade.Tools{}, false, config.Defaults().Health.MCPTools},
		{"recorded", &upgrade.Tools{Names: []string{"a", "b"}}, false, []string{"a", "b"}},
		{"overridden", &upgrade.Tools{Names: []string{"a", "b"}}, true, []string{"execute"}},
	} {
		r := testOldRel
		r.MCPTools = tc.tools
		if got := toolsIn(c, r, tc.overridden); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ToolsIn = %v, want %v", tc.name, got, tc.want)
		}
	}
	p := withPin(c, testNewRel)
	if p.Executor.Image != testNewRel.Image || p.Executor.PlatformDigests[c.PinKey()] != testNewRel.ManifestDigest.String() {
		t.Errorf("Pinned = %s %v, want %s pinned to %s", p.Executor.Image, p.Executor.PlatformDigests, testNewRel.Image, testNewRel.ManifestDigest)
	}
	if c.Executor.Image == testNewRel.Image || c.Executor.PlatformDigests[c.PinKey()] == testNewRel.ManifestDigest.String() {
		t.Errorf("Pinned changed cfg")
	}
}
