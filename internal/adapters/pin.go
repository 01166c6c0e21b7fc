package adapters

import (
	"maps"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/pinfile"
	"github.com/hermesbox/hbx/upgrade"
)

// The pin a release change moves: the configuration with a release
// pinned, the tool set in force with it, the checks that gate it, and the
// config file's pin as upgrade.Config.

// toolsIn is the MCP tool set in force once r is pinned: r's (the default
// when r pins none), or cfg's when r records none or an HBX_* variable or
// a flag sets health.mcp_tools (overridden).
func toolsIn(cfg *config.Config, r upgrade.Release, overridden bool) []string {
	switch {
	case overridden || r.MCPTools == nil:
		return cfg.Health.MCPTools
	case r.MCPTools.Names == nil:
		return config.Defaults().Health.MCPTools
	}
	return r.MCPTools.Names
}

// withPin is cfg with r as executor.image and its platform pin; cfg is
// not changed.
func withPin(cfg *config.Config, r upgrade.Release) *config.Config {
	c := *cfg
	c.Executor.Image = r.Image
	c.Executor.PlatformDigests = maps.Clone(cfg.Executor.PlatformDigests)
	if c.Executor.PlatformDigests == nil {
		c.Executor.PlatformDigests = map[string]string{}
	}
	c.Executor.PlatformDigests[cfg.PinKey()] = r.ManifestDigest.String()
	return &c
}

// gateChecks names the health checks that gate a release change once cfg
// (withPin) is in force, in order: health.readiness (api-health by
// default), mcp-auth, supervisor, release, and mcp-tools when a key is
// configured (health.token_file) and readiness is not already mcp-tools.
func gateChecks(cfg *config.Config) []string {
	names := []string{cfg.Health.Readiness, "mcp-auth", "supervisor", "release"}
	if cfg.Health.TokenFile != "" && cfg.Health.Readiness != "mcp-tools" {
		names = append(names, "mcp-tools")
	}
	return names
}

// releasePin is upgrade.Config over the config file (pinfile.File).
type releasePin struct{ pinfile.File }

// Pin implements upgrade.Config: r's image and manifest, and its tool
// set unless r.MCPTools is nil, in one write.
func (p releasePin) Pin(r upgrade.Release) (string, error) {
	tools := config.PinTools{Keep: true}
	if r.MCPTools != nil {
		tools = config.PinTools{Names: r.MCPTools.Names}
	}
	return p.PinRelease(r.Image, r.ManifestDigest, tools)
}
