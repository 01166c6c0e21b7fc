package upgrade

import (
	"fmt"
	"slices"
	"strings"
)

// WithTools sets t's tool sets: tools (nil: none asked) to pin with the
// new release, and current, the set the config file pins now (nil: it
// sets none), recorded with the old release so a rollback puts it back.
func (t *Target) WithTools(tools, current []string) {
	if tools != nil {
		t.MCPTools = &Tools{Names: tools}
	}
	t.Current = &Tools{Names: current}
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
