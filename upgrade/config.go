package upgrade

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/hermesbox/hbx/internal/config"
)

// overriding returns where key is set when an HBX_* variable or a flag
// sets it, which then wins over the config file; false otherwise (also
// when srcs is nil: not known).
func overriding(srcs *config.Sources, key string) (config.Source, bool) {
	s := srcs.Of(key)
	return s, s.Kind == config.SourceEnv || s.Kind == config.SourceFlag
}

// ToolsOverridden reports whether an HBX_* variable or a flag sets
// health.mcp_tools, which then wins over the tool set pinned with a
// release.
func ToolsOverridden(srcs *config.Sources) bool {
	_, ok := overriding(srcs, "health.mcp_tools")
	return ok
}

// CheckPinnable refuses, before anything happens, an upgrade whose pin
// cannot be written to the config file at path or would be overridden
// there (the running supervisor reads the pin from that file at each
// start, so such an upgrade could only roll back), and a tool set (tools,
// nil: none asked) the health gate cannot check or the file cannot pin.
// It only reads.
func CheckPinnable(path string, cfg *config.Config, srcs *config.Sources, tools []string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no config file at %s to pin the new release in (%v): create it, or pass --config or set HBX_CONFIG", path, err)
	}
	for _, k := range []string{"executor.image", "executor.platform_digests"} {
		if s, ok := overriding(srcs, k); ok {
			return fmt.Errorf("%s is set by %s, which overrides the config file, where the upgrade pins the new release: unset it", k, s)
		}
	}
	if tools == nil {
		return nil
	}
	if cfg.Health.TokenFile == "" {
		return errors.New("--mcp-tools needs health.token_file: the health gate lists the tools with the MCP key")
	}
	if s, ok := overriding(srcs, "health.mcp_tools"); ok {
		return fmt.Errorf("--mcp-tools: health.mcp_tools is set by %s, which overrides the config file, where --mcp-tools pins the tool set: unset it", s)
	}
	return nil
}

// WithTools sets t's tool sets: tools (nil: none asked) to pin with the
// new release, and Current, the set the config file at path pins now,
// recorded with the old release so a rollback puts it back. It only
// reads; an unreadable file or value is an error.
func (t *Target) WithTools(path string, tools []string) error {
	if tools != nil {
		t.MCPTools = &Tools{Names: tools}
	}
	current, err := config.ReadMCPTools(path)
	if err != nil {
		return fmt.Errorf("read health.mcp_tools: %w", err)
	}
	t.Current = &Tools{Names: current}
	return nil
}

// ParseTools parses a tool set given as comma-separated tool names (hbx
// upgrade --mcp-tools): at least one, none blank or repeated, the rules
// of health.mcp_tools. The error quotes v.
func ParseTools(v string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
			return nil, fmt.Errorf("%q has an empty tool name (want names such as execute,resume,skills)", v)
		case slices.Contains(out, n):
			return nil, fmt.Errorf("%q lists %q twice", v, n)
		}
		out = append(out, n)
	}
	return out, nil
}

// ToolsIn is the MCP tool set in force once r is pinned: r's (the default
// when r pins none), or cfg's when r records none or an HBX_* variable or
// a flag sets health.mcp_tools (overridden).
func ToolsIn(cfg *config.Config, r Release, overridden bool) []string {
	switch {
	case overridden || r.MCPTools == nil:
		return cfg.Health.MCPTools
	case r.MCPTools.Names == nil:
		return config.Defaults().Health.MCPTools
	}
	return r.MCPTools.Names
}

// Pinned is cfg with r as executor.image and its platform pin; cfg is
// not changed.
func Pinned(cfg *config.Config, r Release) *config.Config {
	c := *cfg
	c.Executor.Image = r.Image
	c.Executor.PlatformDigests = maps.Clone(cfg.Executor.PlatformDigests)
	if c.Executor.PlatformDigests == nil {
		c.Executor.PlatformDigests = map[string]string{}
	}
	c.Executor.PlatformDigests[cfg.PinKey()] = r.Manifest.String()
	return &c
}

// ConfigFile is Config over the config file at Path, which Cfg was
// loaded from (Sources: where each value came from; nil: not known).
type ConfigFile struct {
	Path    string
	Cfg     *config.Config
	Sources *config.Sources
}

// Pin writes r into the config file; without a file on disk it writes
// nothing and says so, as it says when HBX_* variables or flags override
// the file.
func (p ConfigFile) Pin(r Release) (string, error) {
	tools := config.PinTools{Keep: true}
	if r.MCPTools != nil {
		tools = config.PinTools{Names: r.MCPTools.Names}
	}
	key := p.Cfg.PinKey()
	err := config.WritePinTools(p.Path, r.Image, key, r.Manifest.String(), tools)
	if errors.Is(err, config.ErrNoFile) {
		return fmt.Sprintf("no config file at %s: nothing written; set executor.image to %s (and executor.platform_digests.%s to %s) so the next boot pins it", p.Path, r.Image, key, r.Manifest), nil
	}
	if err != nil {
		return "", err
	}
	var notes []string
	keys := []string{"executor.image", "executor.platform_digests"}
	if r.MCPTools != nil {
		keys = append(keys, "health.mcp_tools")
	}
	for _, k := range keys {
		if s, ok := overriding(p.Sources, k); ok {
			notes = append(notes, fmt.Sprintf("%s is set by %s, which overrides the config file: change it there", k, s))
		}
	}
	return strings.Join(notes, "; "), nil
}

// GateChecks names the health checks that gate a release change once cfg
// (Pinned) is in force, in order: health.readiness (api-health by
// default), mcp-auth, supervisor, release, and mcp-tools when a key is
// configured (health.token_file) and readiness is not already mcp-tools.
func GateChecks(cfg *config.Config) []string {
	names := []string{cfg.Health.Readiness, "mcp-auth", "supervisor", "release"}
	if cfg.Health.TokenFile != "" && cfg.Health.Readiness != "mcp-tools" {
		names = append(names, "mcp-tools")
	}
	return names
}
