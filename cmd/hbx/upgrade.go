package main

import (
	"context"
	"encoding/json"
	"fmt"

	digest "github.com/opencontainers/go-digest"
	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/adapters"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/pinfile"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/upgrade"
)

// upgradeFlags are the flags of `hbx upgrade`.
type upgradeFlags struct {
	image          string
	platformDigest string
	mcpTools       string
	from           string
	json           bool
	noRehearsal    bool
}

// newUpgradeCommand builds `hbx upgrade`.
func newUpgradeCommand(g *globals) *cobra.Command {
	var o upgradeFlags
	cmd := &cobra.Command{
		Use:   "upgrade --image REF [--platform-digest DIGEST] [--mcp-tools NAMES] [--from PATH] [--no-rehearsal]",
		Short: "Move to a new pinned Executor release, backed up, health-checked, rolled back on failure",
		Long: `Upgrade moves the box to the image REF (name:tag@sha256:<64 hex>, the
rules of executor.image), with hbx supervise running: it stages the new
release, rehearses it on a copy of the data on a scratch loopback port
while the box keeps running (refused, with its last output lines, when
it would not come up: docs/upgrade.md#rehearsal; --no-rehearsal skips
it), takes a pre-upgrade backup, pins and activates it, waits for the
health checks and rolls back on failure (docs/upgrade.md#upgrade; an
interrupted one: docs/upgrade.md#crash-recovery). Then it removes the
releases neither current nor previous, with their blobs, and says what it
freed (docs/upgrade.md#old-releases). hbx resolve NAME:TAG gives REF and
--platform-digest.

--mcp-tools execute,resume,skills pins the MCP tool set of the new image
with it (docs/upgrade.md#the-mcp-tool-set). --json prints one JSON line
per step and the result.

--from PATH stages REF from an OCI image layout directory or OCI archive
instead of the registry (as hbx install --from), checked by REF's digests.`,
		Args: cli.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, tools, err := o.target(cmd.Flags().Changed("mcp-tools"))
			if err != nil {
				return err
			}
			cfg, srcs, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			return runUpgrade(cmd.Context(), changeOpts{g: g, cfg: cfg, srcs: srcs, json: o.json, from: o.from, noRehearsal: o.noRehearsal}, t, tools)
		},
	}
	cmd.Flags().StringVar(&o.image, "image", "", "the new image reference, name:tag@sha256:<64 hex> (required)")
	cmd.Flags().StringVar(&o.platformDigest, "platform-digest", "", "pin the configured platform's child manifest digest")
	cmd.Flags().StringVar(&o.mcpTools, "mcp-tools", "", "pin the new image's MCP tool set, comma-separated, as health.mcp_tools (needs health.token_file)")
	cmd.Flags().StringVar(&o.from, "from", "", "read the image from the OCI layout directory or OCI archive `PATH` instead of the registry")
	cmd.Flags().BoolVar(&o.json, "json", false, "print steps and the result as JSON lines")
	cmd.Flags().BoolVar(&o.noRehearsal, "no-rehearsal", false, "do not boot the release --image names on a copy of the data before stopping the box")
	return cmd
}

// target checks the flags and returns the release to upgrade to and the
// tool set to pin with it (nil unless withTools: --mcp-tools was given).
func (o upgradeFlags) target(withTools bool) (t upgrade.Target, tools []string, err error) {
	if o.image == "" {
		return t, nil, cli.Usagef("--image is required")
	}
	ref, err := config.ParseImageRef(o.image)
	if err != nil {
		return t, nil, &cli.UsageError{Err: fmt.Errorf("--image: %w", err)}
	}
	t = upgrade.Target{Target: release.Target{Image: o.image, IndexDigest: ref.Digest}}
	if o.platformDigest != "" {
		t.ManifestDigest = digest.Digest(o.platformDigest)
		if err := t.ManifestDigest.Validate(); err != nil || t.ManifestDigest.Algorithm() != digest.SHA256 {
			return t, nil, cli.Usagef("--platform-digest %q: want sha256:<64 hex>", o.platformDigest)
		}
	}
	if withTools {
		if tools, err = upgrade.ParseTools(o.mcpTools); err != nil {
			return t, nil, &cli.UsageError{Err: fmt.Errorf("--mcp-tools: %w", err)}
		}
	}
	return t, tools, nil
}

// changeOpts are what `hbx upgrade` and `hbx rollback` run with.
type changeOpts struct {
	g    *globals
	cfg  *config.Config
	srcs *config.Sources
	json bool   // steps and the result as JSON lines
	from string // hbx upgrade --from: stage from this OCI layout or archive
	// noRehearsal: hbx upgrade --no-rehearsal, no rehearsal on a copy of
	// the data before the box is stopped.
	noRehearsal bool
}

// runUpgrade moves the box to t as hbx upgrade does, pinning tools with
// it unless nil: the passphrase of the pre-upgrade backup, the change's
// options as "hbx upgrade" (adapters.ChangeOptions), then upgrade.Upgrade; it
// prints old → new.
func runUpgrade(ctx context.Context, o changeOpts, t upgrade.Target, tools []string) error {
	if err := (pinfile.File{Path: o.g.configPath, Config: o.cfg, Sources: o.srcs}).CheckUpgrade(tools); err != nil {
		return cli.Usagef("upgrade: %w", err)
	}
	if err := checkFrom("upgrade", o.from); err != nil {
		return err
	}
	res, err := upgradeTo(ctx, o, t, tools)
	if err != nil {
		pruneAfterFailure(ctx, o.g, o.cfg, "hbx upgrade", err)
		return fmt.Errorf("upgrade: %w", adapters.OfflineHint(err, o.from, "hbx upgrade"))
	}
	res.Notes = append(res.Notes, pruneAfter(ctx, o.g, o.cfg, "hbx upgrade"))
	return printChange(o.g.stdout, "upgraded", res, o.json)
}

// upgradeTo composes and runs the upgrade of runUpgrade.
func upgradeTo(ctx context.Context, o changeOpts, t upgrade.Target, tools []string) (*upgrade.Result, error) {
	b := o.g.box(o.cfg, o.srcs)
	b.From = o.from
	current, err := pinfile.File{Path: b.ConfigPath}.Tools()
	if err != nil {
		return nil, err
	}
	t.WithTools(tools, current)
	pass, err := b.Passphrase(false)()
	if err != nil {
		return nil, fmt.Errorf("pre-upgrade backup: %w", err)
	}
	opts, unlock, err := b.ChangeOptions(ctx, pass, "hbx upgrade", o.step())
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !o.noRehearsal {
		opts.Rehearse = b.Rehearsal(opts.Services)
	}
	return upgrade.Upgrade(ctx, opts, t)
}

// step tells each step of an upgrade or rollback as a JSON line
// ({"event": step}) with o.json; nil otherwise.
func (o changeOpts) step() func(string) {
	if !o.json {
		return nil
	}
	enc := json.NewEncoder(o.g.stdout)
	return func(s string) { _ = enc.Encode(map[string]string{"event": s}) }
}
