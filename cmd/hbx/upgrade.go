package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/buildinfo"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

// preUpgradeName starts the file name of every pre-upgrade archive.
const preUpgradeName = "pre-upgrade"

// upgradeFlags are the flags of `hbx upgrade`.
type upgradeFlags struct {
	image          string
	platformDigest string
	mcpTools       string
	json           bool
}

// newUpgradeCommand builds `hbx upgrade`.
func newUpgradeCommand(g *globals) *cobra.Command {
	var o upgradeFlags
	cmd := &cobra.Command{
		Use:   "upgrade --image REF [--platform-digest DIGEST] [--mcp-tools NAMES]",
		Short: "Move to a new pinned Executor release, backed up, health-checked, rolled back on failure",
		Long: `Upgrade moves the box to the image REF (name:tag@sha256:<64 hex>, the
rules of executor.image), with hbx supervise running:

  1. refuse a REF without tag or full digest, or one equal to the active
     release, before anything happens;
  2. stage the new release beside the active one (pull, verify, extract,
     validate) while the services keep running;
  3. stop the services and take a cold backup of the data, named
     pre-upgrade-<time> in backup.dir, recording the old digests;
  4. pin the new release in the config file, activate it, start the
     services and wait (backup.health_wait) for the health checks
     api-health, mcp-auth, supervisor and release (and mcp-tools when
     health.token_file is set);
  5. on any failure after step 4 began: roll back (see hbx rollback) and
     exit 1 saying what failed.

--mcp-tools execute,resume,skills pins the MCP tool set of the new image
with it: written as health.mcp_tools into the config file in the same
write as the pin, checked by the health gate (mcp-tools), and put back as
it was by a rollback. It needs health.token_file (the gate lists the tools
with the key) and is refused while an HBX_* variable or a flag sets
health.mcp_tools. Without it the config file's tool set stays.

Each step is recorded in <runtime_dir>/upgrade.json, so an interrupted
upgrade is finished or undone by the next hbx supervise, upgrade or
rollback. The config file keeps its comments. Without a config file on
disk, or with executor.image or executor.platform_digests set by an HBX_*
variable or a flag, the upgrade is refused (the supervisor reads the pin
from the file at each start). --json prints one JSON line per step and the
result.`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.image == "" {
				return usageErrorf("--image is required")
			}
			ref, err := config.ParseImageRef(o.image)
			if err != nil {
				return &usageError{fmt.Errorf("--image: %w", err)}
			}
			var pin digest.Digest
			if o.platformDigest != "" {
				pin = digest.Digest(o.platformDigest)
				if err := pin.Validate(); err != nil || pin.Algorithm() != digest.SHA256 {
					return usageErrorf("--platform-digest %q: want sha256:<64 hex>", o.platformDigest)
				}
			}
			var tools []string
			if cmd.Flags().Changed("mcp-tools") {
				if tools, err = parseTools(o.mcpTools); err != nil {
					return &usageError{fmt.Errorf("--mcp-tools: %w", err)}
				}
			}
			cfg, srcs, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			return runUpgrade(cmd.Context(), g, cfg, srcs, upgrade.Target{Image: o.image, Index: ref.Digest, Pin: pin}, tools, o.json)
		},
	}
	cmd.Flags().StringVar(&o.image, "image", "", "the new image reference, name:tag@sha256:<64 hex> (required)")
	cmd.Flags().StringVar(&o.platformDigest, "platform-digest", "", "pin the configured platform's child manifest digest")
	cmd.Flags().StringVar(&o.mcpTools, "mcp-tools", "", "pin the new image's MCP tool set, comma-separated, as health.mcp_tools (needs health.token_file)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print steps and the result as JSON lines")
	return cmd
}

// parseTools parses the value of --mcp-tools: comma-separated tool names,
// at least one, none blank or repeated (the rules of health.mcp_tools).
func parseTools(v string) ([]string, error) {
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

// runUpgrade upgrades to t, pinning tools with it unless nil, and prints
// old → new.
func runUpgrade(ctx context.Context, g *globals, cfg *config.Config, srcs *config.Sources, t upgrade.Target, tools []string, asJSON bool) error {
	// The running supervisor reads the pin from the config file at each
	// start: an upgrade whose pin cannot be written there, or is
	// overridden, could only roll back. Refuse before anything happens.
	if _, err := os.Stat(g.configPath); err != nil {
		return usageErrorf("upgrade: no config file at %s to pin the new release in (%v): create it, or pass --config or set HBX_CONFIG", g.configPath, err)
	}
	for _, k := range []string{"executor.image", "executor.platform_digests"} {
		if s := srcs.Of(k); s.Kind == config.SourceEnv || s.Kind == config.SourceFlag {
			return usageErrorf("upgrade: %s is set by %s, which overrides the config file, where the upgrade pins the new release: unset it", k, s)
		}
	}
	if tools != nil {
		if cfg.Health.TokenFile == "" {
			return usageErrorf("upgrade: --mcp-tools needs health.token_file: the health gate lists the tools with the MCP key")
		}
		if s := srcs.Of("health.mcp_tools"); s.Kind == config.SourceEnv || s.Kind == config.SourceFlag {
			return usageErrorf("upgrade: --mcp-tools: health.mcp_tools is set by %s, which overrides the config file, where --mcp-tools pins the tool set: unset it", s)
		}
		t.MCPTools = &upgrade.Tools{Names: tools}
	}
	// The tool set the file pins now goes into the journal with the old
	// release, so a rollback puts it back.
	current, err := config.ReadMCPTools(g.configPath)
	if err != nil {
		return fmt.Errorf("upgrade: read health.mcp_tools: %w", err)
	}
	t.Current = &upgrade.Tools{Names: current}
	pass, err := passphrase(cfg, false)()
	if err != nil {
		return fmt.Errorf("upgrade: pre-upgrade backup: %w", err)
	}
	opts, unlock, err := upgradeOptions(ctx, g, cfg, srcs, pass, asJSON, "hbx upgrade")
	if err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	defer unlock()
	res, err := upgrade.Upgrade(ctx, opts, t)
	if err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	return printUpgrade(g.stdout, "upgraded", res, asJSON)
}

// upgradeOptions composes the installer, supervisor, health checks,
// backup and config file for package upgrade. pass is the backup
// passphrase (nil: asked when needed); command names the caller in the
// lock (e.g. "hbx upgrade"). When no supervisor answers, the
// data directory's lock is taken (refused while hbx run executor or a
// supervisor on another socket runs the payload) and unlock releases it;
// unlock is never nil.
func upgradeOptions(ctx context.Context, g *globals, cfg *config.Config, srcs *config.Sources, pass []byte, asJSON bool, command string) (opts upgrade.Options, unlock func(), err error) {
	unlock = func() {}
	opts = upgrade.Options{
		RuntimeDir:     cfg.Executor.RuntimeDir,
		DataDir:        cfg.Executor.DataDir,
		KeepRolledBack: cfg.Backup.KeepPreRestore,
		LockWait:       cfg.Backup.LockWait,
		HealthWait:     cfg.Backup.HealthWait,
		Runtime:        upgradeRuntime{g: g, cfg: cfg},
		Data:           &upgradeData{g: g, cfg: cfg, pass: pass, toolsOverridden: toolsOverridden(srcs)},
		Config:         configPinner{g: g, cfg: cfg, srcs: srcs},
		Logger:         g.log,
	}
	if asJSON {
		enc := json.NewEncoder(g.stdout)
		opts.Step = func(s string) { _ = enc.Encode(map[string]string{"event": s}) }
	}
	svc, err := dialServices(ctx, g, cfg)
	if err != nil {
		return opts, unlock, err
	}
	if svc != nil {
		opts.Services = &upgradeServices{svc: svc, g: g, cfg: cfg, toolsOverridden: toolsOverridden(srcs)}
	}
	if svc == nil {
		if unlock, err = lockDataUnsupervised(ctx, g, cfg, nil, command); err != nil {
			return opts, unlock, err
		}
	}
	// An interrupted restore is undone first, its runtime and pin too, so
	// the upgrade or rollback reads the release the data belongs to.
	if err := recoverRestoreFor(ctx, g, cfg, srcs, svc); err != nil {
		unlock()
		return opts, func() {}, err
	}
	return opts, unlock, nil
}

// toolsOverridden reports whether an HBX_* variable or a flag sets
// health.mcp_tools, which then wins over the tool set pinned with a
// release.
func toolsOverridden(srcs *config.Sources) bool {
	s := srcs.Of("health.mcp_tools")
	return s.Kind == config.SourceEnv || s.Kind == config.SourceFlag
}

// printUpgrade prints an upgrade's or rollback's result.
func printUpgrade(w io.Writer, verb string, res *upgrade.Result, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(map[string]any{
			"event": "result", "old": res.Old, "new": res.New, "backup": res.Backup, "kept_aside": res.KeptAside,
			"notes": res.Notes, "recovered": res.Recovered, "interrupted": res.Interrupted, "duration_ms": res.Duration.Milliseconds(),
		})
	}
	var b strings.Builder
	if res.Interrupted {
		// The recovery of an interrupted change was the whole rollback.
		fmt.Fprintf(&b, "%s\n", res.Recovered)
		fmt.Fprintf(&b, "  %s is active; nothing more to roll back\n", res.New.Image)
		for _, n := range res.Notes {
			fmt.Fprintf(&b, "  note: %s\n", n)
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "%s %s → %s in %s\n", verb, res.Old.Image, res.New.Image, res.Duration.Round(time.Millisecond))
	fmt.Fprintf(&b, "  manifest %s → %s\n", res.Old.Manifest, res.New.Manifest)
	if res.Backup != "" {
		fmt.Fprintf(&b, "  pre-upgrade backup: %s\n", res.Backup)
	}
	if res.KeptAside != "" {
		fmt.Fprintf(&b, "  the replaced data is kept in %s\n", res.KeptAside)
	}
	if res.Recovered != "" {
		fmt.Fprintf(&b, "  first %s\n", res.Recovered)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// recoverUpgrade finishes or undoes an interrupted upgrade: before `hbx
// supervise` starts the programs (no supervisor runs yet), or, with
// running, from the running supervisor (watchChanges), through it. It
// logs what it did and returns whether it failed.
func recoverUpgrade(ctx context.Context, g *globals, cfg *config.Config, running bool) bool {
	opts := upgrade.Options{
		RuntimeDir:     cfg.Executor.RuntimeDir,
		DataDir:        cfg.Executor.DataDir,
		KeepRolledBack: cfg.Backup.KeepPreRestore,
		HealthWait:     cfg.Backup.HealthWait,
		Runtime:        upgradeRuntime{g: g, cfg: cfg},
		Data:           &upgradeData{g: g, cfg: cfg},
		Config:         configPinner{g: g, cfg: cfg},
		Logger:         g.log,
	}
	msg, err := upgrade.Recover(ctx, opts)
	switch {
	case err != nil && running:
		g.log.Error("an interrupted upgrade could not be recovered; retrying", "err", err)
	case err != nil:
		g.log.Error("an interrupted upgrade could not be recovered; starting the programs anyway", "err", err)
	case msg != "" && running:
		g.log.Warn("interrupted upgrade recovered by the running supervisor", "what", msg)
	case msg != "":
		g.log.Warn("interrupted upgrade recovered", "what", msg)
	}
	return err != nil
}

// releaseOf describes an installed release for package upgrade.
func releaseOf(inst *release.Installed) upgrade.Release {
	m := inst.Meta
	return upgrade.Release{Image: m.Image, Platform: m.Platform, Index: m.IndexDigest, Manifest: m.ManifestDigest}
}

// upgradeRuntime is upgrade.Runtime over the installer; progress and log,
// when set, go to Stage's install.
type upgradeRuntime struct {
	g        *globals
	cfg      *config.Config
	progress installer.Progress
	log      *slog.Logger
}

func (r upgradeRuntime) Active() (upgrade.Release, error) {
	inst, err := release.Current(r.cfg.Executor.RuntimeDir)
	if err != nil {
		return upgrade.Release{}, err
	}
	return releaseOf(inst), nil
}

func (r upgradeRuntime) Previous() (upgrade.Release, error) {
	inst, err := release.Link(r.cfg.Executor.RuntimeDir, release.PreviousLink)
	if err != nil {
		return upgrade.Release{}, err
	}
	return releaseOf(inst), nil
}

func (r upgradeRuntime) Stage(ctx context.Context, image string, pin digest.Digest) (upgrade.Release, error) {
	opts, err := installerOptions(r.g, r.cfg)
	if err != nil {
		return upgrade.Release{}, err
	}
	opts.Image, opts.PlatformDigest, opts.StageOnly = image, pin, true
	opts.Progress = r.progress
	if r.log != nil {
		opts.Logger = r.log
	}
	res, err := installer.Install(ctx, opts)
	if err != nil {
		return upgrade.Release{}, err
	}
	return releaseOf(res.Release), nil
}

func (r upgradeRuntime) Activate(ctx context.Context, manifest digest.Digest) error {
	return installer.Activate(ctx, r.cfg.Executor.RuntimeDir, manifest, r.cfg.Install.LockWait)
}

// releaseRuntime is backup.Runtime for rollbacks: a release that current
// or previous already holds is activated in place (no network); any other
// is installed like `hbx install` would.
type releaseRuntime struct {
	g   *globals
	cfg *config.Config
}

func (r releaseRuntime) Install(ctx context.Context, image, platform string, manifest digest.Digest) (bool, error) {
	ref, err := installer.ParseReference(image)
	if err == nil {
		match := func(inst *release.Installed) bool {
			return inst.Meta.Matches(ref.Digest(), platform, manifest) == nil
		}
		if cur, err := release.Current(r.cfg.Executor.RuntimeDir); err == nil && match(cur) {
			return false, nil
		}
		if prev, err := release.Link(r.cfg.Executor.RuntimeDir, release.PreviousLink); err == nil && match(prev) {
			if err := installer.Activate(ctx, r.cfg.Executor.RuntimeDir, prev.Meta.ManifestDigest, r.cfg.Install.LockWait); err != nil {
				return false, err
			}
			return true, nil
		}
	}
	return installRuntime{g: r.g, cfg: r.cfg}.Install(ctx, image, platform, manifest)
}

// upgradeServices is upgrade.Services over the supervisor and the checks
// of `hbx health`.
type upgradeServices struct {
	svc *supervisorServices
	g   *globals
	cfg *config.Config
	// toolsOverridden: an HBX_* variable or a flag sets health.mcp_tools,
	// which then wins over the tool set pinned with a release.
	toolsOverridden bool
}

func (s *upgradeServices) Hold(ctx context.Context) (upgrade.Hold, error) {
	return s.svc.Hold(ctx)
}

// Gone is closed once the supervisor is gone (upgrade.Watcher).
func (s *upgradeServices) Gone() <-chan struct{} { return s.svc.Gone() }

// WaitHealthy waits for the programs, then for the checks
// health.readiness names (api-health by default), mcp-auth, supervisor
// and release (pinned to r), and mcp-tools (the tool set pinned with r)
// when a key is configured.
func (s *upgradeServices) WaitHealthy(ctx context.Context, r upgrade.Release) error {
	c := pinnedConfig(s.cfg, r)
	c.Health.MCPTools = toolsOf(s.cfg, r, s.toolsOverridden)
	// The readiness wait judges r's tool set too (health.readiness
	// mcp-tools).
	saved := s.svc.probe
	s.svc.probe = supervisor.ProbeFunc(readinessProbe(c))
	err := s.svc.WaitHealthy(ctx)
	s.svc.probe = saved
	if err != nil {
		return err
	}
	names := []string{c.Health.Readiness, "mcp-auth", "supervisor", "release"}
	if c.Health.TokenFile != "" && c.Health.Readiness != "mcp-tools" {
		names = append(names, "mcp-tools")
	}
	left := time.Minute
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	checks := healthChecks(c, false, s.g.log)
	// The change that waits is the one its journal records as unfinished.
	checks.Release.Change = nil
	rep, err := health.Wait(ctx, checks, names, left, 0)
	if err != nil && rep == nil {
		return err
	}
	var failed []string
	for _, c := range rep.Checks {
		if c.Status == health.Fail {
			failed = append(failed, fmt.Sprintf("%s (%s)", c.Name, c.Reason))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: checks failing: %s", health.ErrUnhealthy, strings.Join(failed, "; "))
	}
	if err != nil {
		return err
	}
	return nil
}

// toolsOf is the MCP tool set in force once r is pinned: r's (the default
// when r pins none), or cfg's when r records none or an HBX_* variable or
// a flag sets health.mcp_tools (overridden).
func toolsOf(cfg *config.Config, r upgrade.Release, overridden bool) []string {
	switch {
	case overridden || r.MCPTools == nil:
		return cfg.Health.MCPTools
	case r.MCPTools.Names == nil:
		return config.Defaults().Health.MCPTools
	}
	return r.MCPTools.Names
}

// pinnedConfig is cfg with r as executor.image and its platform pin.
func pinnedConfig(cfg *config.Config, r upgrade.Release) *config.Config {
	c := *cfg
	c.Executor.Image = r.Image
	c.Executor.PlatformDigests = maps.Clone(cfg.Executor.PlatformDigests)
	if c.Executor.PlatformDigests == nil {
		c.Executor.PlatformDigests = map[string]string{}
	}
	c.Executor.PlatformDigests[cfg.PinKey()] = r.Manifest.String()
	return &c
}

// upgradeData is upgrade.Data over package backup.
type upgradeData struct {
	g    *globals
	cfg  *config.Config
	pass []byte
	// toolsOverridden: an HBX_* variable or a flag sets health.mcp_tools.
	toolsOverridden bool
	// inSupervisor: the caller is hbx supervise's install on start,
	// before its programs run (its socket answers status only; a hold
	// would wait for the install); Restore does not dial it.
	inSupervisor bool
}

// heldServices is backup.Services while the upgrade holds the programs
// stopped itself: nothing more to stop (a nil Hold), nothing to start;
// the upgrade starts them again and says so.
type heldServices struct{}

func (heldServices) Hold(context.Context) (backup.Hold, error)   { return nil, nil }
func (heldServices) WaitHealthy(context.Context) error           { return nil }
func (heldServices) WaitRunning(context.Context, []string) error { return nil }

func (d *upgradeData) passphrase() ([]byte, error) {
	if d.pass != nil {
		return d.pass, nil
	}
	p, err := passphrase(d.cfg, false)()
	if err != nil {
		return nil, err
	}
	d.pass = p
	return p, nil
}

func (d *upgradeData) Backup(ctx context.Context, r upgrade.Release) (string, error) {
	pass, err := d.passphrase()
	if err != nil {
		return "", err
	}
	res, err := backup.Create(ctx, backup.Options{
		DataDir:        d.cfg.Executor.DataDir,
		Paths:          d.cfg.Backup.Paths,
		RuntimeDir:     d.cfg.Executor.RuntimeDir,
		StateDir:       d.cfg.Executor.StateDir,
		Dir:            d.cfg.Backup.Dir,
		Name:           preUpgradeName,
		Keep:           d.cfg.Backup.Keep,
		Compression:    backup.Compression(d.cfg.Backup.Compression),
		Encrypt:        true,
		Passphrase:     pass,
		Image:          r.Image,
		Platform:       r.Platform,
		PlatformDigest: r.Manifest,
		HbxVersion:     buildinfo.Version,
		LockWait:       d.cfg.Backup.LockWait,
		Services:       heldServices{},
		Logger:         d.g.log,
	})
	if err != nil {
		return "", err
	}
	return res.Path, nil
}

func (d *upgradeData) Check(archive string, r upgrade.Release) error {
	infos, err := backup.List(d.cfg.Backup.Dir, preUpgradeName)
	if err != nil {
		return err
	}
	for _, in := range infos {
		if in.Path != archive {
			continue
		}
		if in.IndexDigest != r.Index || in.ManifestDigest != r.Manifest {
			return fmt.Errorf("the archive records index %s manifest %s, previous is index %s manifest %s", in.IndexDigest, in.ManifestDigest, r.Index, r.Manifest)
		}
		return nil
	}
	if _, err := os.Stat(archive); err != nil {
		return err
	}
	return errors.New("the archive has no summary file (.json) to check its digests against")
}

func (d *upgradeData) Restore(ctx context.Context, archive string, r upgrade.Release) (string, error) {
	owner, err := lookupOwner(d.cfg.Executor.User)
	if err != nil {
		return "", err
	}
	opts := backup.RestoreOptions{
		Archive:        archive,
		Passphrase:     d.passphrase,
		DataDir:        d.cfg.Executor.DataDir,
		RuntimeDir:     d.cfg.Executor.RuntimeDir,
		StateDir:       d.cfg.Executor.StateDir,
		BackupDir:      d.cfg.Backup.Dir,
		AllowedPaths:   d.cfg.Backup.Paths,
		Owner:          owner,
		KeepPreRestore: max(d.cfg.Backup.KeepPreRestore, 1),
		HealthWait:     d.cfg.Backup.HealthWait,
		LockWait:       d.cfg.Backup.LockWait,
		Runtime:        releaseRuntime{g: d.g, cfg: pinnedConfig(d.cfg, r)},
		Image:          r.Image,
		Platform:       r.Platform,
		Logger:         d.g.log,
	}
	if !d.inSupervisor {
		// The wait after the restore judges r's tool set (health.readiness
		// mcp-tools), which the rollback pinned with it.
		c := *d.cfg
		c.Health.MCPTools = toolsOf(d.cfg, r, d.toolsOverridden)
		svc, err := dialServices(ctx, d.g, &c)
		if err != nil {
			return "", err
		}
		if svc != nil {
			defer svc.Close()
			opts.Services = svc
		}
	}
	res, err := backup.Restore(ctx, opts)
	if err != nil {
		return "", err
	}
	return res.Restored[d.cfg.Executor.DataDir], nil
}

// configPinner is upgrade.Config over the --config file.
type configPinner struct {
	g    *globals
	cfg  *config.Config
	srcs *config.Sources // nil: not known
}

// Pin writes r into the config file; without a file on disk it writes
// nothing and says so, as it says when HBX_* variables or flags override
// the file.
func (p configPinner) Pin(r upgrade.Release) (string, error) {
	tools := config.PinTools{Keep: true}
	if r.MCPTools != nil {
		tools = config.PinTools{Names: r.MCPTools.Names}
	}
	err := config.WritePinTools(p.g.configPath, r.Image, p.cfg.PinKey(), r.Manifest.String(), tools)
	if errors.Is(err, config.ErrNoFile) {
		return fmt.Sprintf("no config file at %s: nothing written; set executor.image to %s (and executor.platform_digests.%s to %s) so the next boot pins it", p.g.configPath, r.Image, p.cfg.PinKey(), r.Manifest), nil
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
		if s := p.srcs.Of(k); s.Kind == config.SourceEnv || s.Kind == config.SourceFlag {
			notes = append(notes, fmt.Sprintf("%s is set by %s, which overrides the config file: change it there", k, s))
		}
	}
	return strings.Join(notes, "; "), nil
}
