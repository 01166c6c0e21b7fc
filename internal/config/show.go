package config

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ShownValue is one key of `hbx config show --json`.
type ShownValue struct {
	Value  any    `json:"value"`
	Source string `json:"source"`
	Detail string `json:"detail,omitempty"`
	Absent bool   `json:"absent,omitempty"` // "config" only: no file was read
}

// Show writes c key by key in ShownKeys order with where each value
// comes from (srcs): a first "config: <file>  # <source>[ (absent)]"
// line, then "key: value  # source" lines with values as YAML flow values,
// or, asJSON, one object of ShownValue keyed by config key ("config"
// first). Errors are w's, wrapped as "write config".
func (c *Config) Show(w io.Writer, srcs *Sources, asJSON bool) error {
	file := srcs.File()
	if asJSON {
		out := map[string]ShownValue{"config": {Value: file.Path, Source: file.Source.Kind, Detail: file.Source.Detail, Absent: !file.Read}}
		for _, k := range c.ShownKeys() {
			v := c.Value(k)
			if d, ok := v.(time.Duration); ok {
				v = d.String()
			}
			src := srcs.Of(k)
			out[k] = ShownValue{Value: v, Source: src.Kind, Detail: src.Detail}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return fmt.Errorf("write config: %w", err)
		}
		return nil
	}
	var b strings.Builder
	absent := ""
	if !file.Read {
		absent = " (absent)"
	}
	fmt.Fprintf(&b, "config: %s  # %s%s\n", yamlString(file.Path), file.Source, absent)
	for _, k := range c.ShownKeys() {
		fmt.Fprintf(&b, "%s: %s  # %s\n", k, yamlValue(c.Value(k)), srcs.Of(k))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}

// yamlValue renders a config value as a YAML flow value: scalars plain
// where YAML reads them back as the same string, lists as [a, b], maps as
// {k: v} with sorted keys.
func yamlValue(v any) string {
	switch v := v.(type) {
	case string:
		return yamlString(v)
	case time.Duration:
		return v.String()
	case []string:
		items := make([]string, len(v))
		for i, s := range v {
			items[i] = yamlString(s)
		}
		return "[" + strings.Join(items, ", ") + "]"
	case map[string]string:
		items := make([]string, 0, len(v))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			items = append(items, yamlString(k)+": "+yamlString(v[k]))
		}
		return "{" + strings.Join(items, ", ") + "}"
	}
	return fmt.Sprint(v)
}

// yamlString returns s plain when it is safe unquoted in a YAML flow
// context and reads back as a string, else double-quoted.
func yamlString(s string) string {
	plain := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._/-@+=:", r))
	}) < 0
	if plain {
		switch {
		case strings.ContainsAny(s[:1], "-:@"), strings.HasSuffix(s, ":"):
			plain = false
		case slices.Contains([]string{"true", "false", "yes", "no", "on", "off", "null", "y", "n", ".inf", ".nan"}, strings.ToLower(s)):
			plain = false
		default:
			_, ferr := strconv.ParseFloat(s, 64)
			_, ierr := strconv.ParseInt(s, 0, 64)
			plain = ferr != nil && ierr != nil
		}
	}
	if plain {
		return s
	}
	return strconv.Quote(s)
}
