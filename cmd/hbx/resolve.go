package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/ui"
	"github.com/hermesbox/hbx/internal/verbopts"
	"github.com/hermesbox/hbx/release"
)

// resolveOptions are the flags of `hbx resolve`.
type resolveOptions struct {
	platform string // "" : executor.platform
	json     bool
}

// newResolveCommand builds `hbx resolve REF`.
func newResolveCommand(g *globals) *cobra.Command {
	var o resolveOptions
	cmd := &cobra.Command{
		Use:   "resolve NAME:TAG[@sha256:DIGEST]",
		Short: "Pin a tag: the digests hbx upgrade takes, and what it would fetch and reuse",
		Long: `Resolve asks the registry what NAME:TAG names now (with the registry
settings of hbx install: registry.insecure_hosts, auth_file, certs_dir,
retries; not registry.mirrors: a tag is asked of its own repository) and
prints the pinned reference NAME:TAG@sha256:<index> (hbx upgrade --image),
the child manifest of the box's platform (executor.platform, or
--platform; hbx upgrade --platform-digest), and which layers an upgrade
would download and which the blob store already holds, with their
compressed sizes, for review before hbx upgrade. A tag that names a single
manifest, not an index, is said so (its digest is both pins). It changes
nothing on disk.

With @sha256:DIGEST, a tag that names another digest now is reported and
exits 1. Exit status: 0 resolved, 1 registry unreachable, unknown tag,
no manifest for the platform or a digest mismatch, 2 a bad REF or
--platform.`,
		Args: cli.Args(1, 1),
		RunE: g.configured(func(cmd *cobra.Command, args []string, cfg *config.Config, _ *config.Sources) error {
			return runResolve(cmd.Context(), g, cfg, args[0], o)
		}),
	}
	cmd.Flags().StringVar(&o.platform, "platform", "", "the platform whose manifest to pick, os/arch[/variant] (default executor.platform)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the result as a JSON line")
	return cmd
}

// runResolve resolves ref as hbx resolve does and prints the result; the
// error, after printing, when the tag names another digest than ref's.
func runResolve(ctx context.Context, g *globals, cfg *config.Config, ref string, o resolveOptions) error {
	r, err := release.ParseTagRef(ref)
	if err != nil {
		return cli.Usagef("resolve: %w", err)
	}
	box, err := installer.ParsePlatform(cfg.Executor.Platform)
	if err != nil {
		return fmt.Errorf("resolve: executor.platform: %w", err)
	}
	p := box
	if o.platform != "" {
		if p, err = installer.ParsePlatform(o.platform); err != nil {
			return cli.Usagef("resolve: --platform: %w", err)
		}
	}
	res, err := installer.ResolveTag(ctx, installer.ResolveOptions{Ref: r, Platform: p,
		RuntimeDir: cfg.Executor.RuntimeDir, Registry: verbopts.RegistryOptions(cfg), Logger: g.log})
	if err != nil {
		return fmt.Errorf("resolve: %w", err)
	}
	if o.json {
		err = ui.ResolveJSON(g.stdout, res)
	} else {
		other := ""
		if !p.Same(box) {
			other = box.String()
		}
		_, err = io.WriteString(g.stdout, ui.ResolveText(res, other, configFlag(g)))
	}
	if err != nil {
		return err
	}
	if err := res.Check(); err != nil {
		return fmt.Errorf("resolve: %w", err)
	}
	return nil
}

// configFlag is the config file the operator named with --config (made
// absolute, so a command line that carries it works from any directory),
// "" when none was named (the default file or $HBX_CONFIG, which the
// same shell finds again).
func configFlag(g *globals) string {
	if g.configFile == nil || g.configFile.Source.Kind != config.SourceFlag {
		return ""
	}
	if abs, err := filepath.Abs(g.configFile.Path); err == nil {
		return abs
	}
	return g.configFile.Path
}
