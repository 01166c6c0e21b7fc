package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/config"
)

// newConfigCommand builds `hbx config`, the group of configuration commands.
func newConfigCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Inspect the configuration",
		Args:  cobra.ArbitraryArgs, // runGroup reports unknown subcommands
		RunE:  runGroup,
	}
	cmd.AddCommand(newConfigShowCommand(g))
	return cmd
}

// configShowOptions are the inputs of runConfigShow.
type configShowOptions struct {
	cfg     *config.Config
	sources *config.Sources
	json    bool // print JSON instead of YAML-ish lines
	stdout  io.Writer
}

// newConfigShowCommand builds `hbx config show`.
func newConfigShowCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print the effective configuration and where each value comes from",
		Long: `Print every configuration key with its effective value and its source:
a flag, an HBX_* environment variable, the config file or the default.

The default output is one YAML-ish line per key, after a first line that
names the config file and where its path came from (--config, HBX_CONFIG
or the default), "(absent)" when no file was read:

  config: /etc/hbx/hbx.yaml  # default (absent)
  executor.port: 4788  # default
  executor.image: ghcr.io/...  # env HBX_EXECUTOR_IMAGE

--json prints one object keyed by config key instead ("config" first), each
entry {"value": ..., "source": "default|file|env|flag", "detail": "path,
variable or flag"}, and "absent": true for a config file not read;
durations are strings such as "30s".

It also checks the files holding secrets that the configuration names
(executor.env_file, backup.passphrase_file, health.token_file), without
reading them: one that exists must be a regular file of mode 0600 or
stricter, else it is invalid configuration (exit 2). Like every command
that reads the configuration, it refuses the runtime, data, state and
backup directories, the secret and config files and hbx's own directory
when a user other than root could replace them (exit 2).`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, srcs, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			if err := cfg.CheckSecretFiles(srcs); err != nil {
				return err
			}
			return runConfigShow(cmd.Context(), configShowOptions{cfg: cfg, sources: srcs, json: asJSON, stdout: g.stdout})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// shownValue is one key of `hbx config show --json`.
type shownValue struct {
	Value  any    `json:"value"`
	Source string `json:"source"`
	Detail string `json:"detail,omitempty"`
	Absent bool   `json:"absent,omitempty"` // "config" only: no file was read
}

// runConfigShow prints opts.cfg key by key in ShownKeys order, with
// sources: "key: value  # source" lines, or one JSON object.
func runConfigShow(_ context.Context, opts configShowOptions) error {
	file := opts.sources.File()
	if opts.json {
		out := map[string]shownValue{"config": {Value: file.Path, Source: file.Source.Kind, Detail: file.Source.Detail, Absent: !file.Read}}
		for _, k := range opts.cfg.ShownKeys() {
			v := opts.cfg.Value(k)
			if d, ok := v.(time.Duration); ok {
				v = d.String()
			}
			src := opts.sources.Of(k)
			out[k] = shownValue{Value: v, Source: src.Kind, Detail: src.Detail}
		}
		enc := json.NewEncoder(opts.stdout)
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
	for _, k := range opts.cfg.ShownKeys() {
		fmt.Fprintf(&b, "%s: %s  # %s\n", k, yamlValue(opts.cfg.Value(k)), opts.sources.Of(k))
	}
	if _, err := io.WriteString(opts.stdout, b.String()); err != nil {
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
