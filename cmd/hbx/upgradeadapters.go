package main

// The adapters of `hbx upgrade`, `hbx rollback`, the release change of
// `hbx install` and the change watch of `hbx supervise`: each fills one
// interface of package upgrade (or backup) with the installer, the
// supervisor, the health checks or package backup, and decides nothing
// (the decisions are upgrade's).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/box"
	"github.com/hermesbox/hbx/internal/buildinfo"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/supervisorwatch"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

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
	return r.link(release.CurrentLink)
}

func (r upgradeRuntime) Previous() (upgrade.Release, error) {
	return r.link(release.PreviousLink)
}

func (r upgradeRuntime) link(name string) (upgrade.Release, error) {
	inst, err := release.Link(r.cfg.Executor.RuntimeDir, name)
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

// Install installs like `hbx install` with pinned as the configured
// release (upgrade.Runtime).
func (r upgradeRuntime) Install(ctx context.Context, pinned upgrade.Release, image, platform string, manifest digest.Digest) (bool, error) {
	return installRuntime{g: r.g, cfg: upgrade.Pinned(r.cfg, pinned)}.Install(ctx, image, platform, manifest)
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
	c := upgrade.Pinned(s.cfg, r)
	c.Health.MCPTools = upgrade.ToolsIn(s.cfg, r, s.toolsOverridden)
	// The readiness wait judges r's tool set too (health.readiness
	// mcp-tools).
	saved := s.svc.probe
	s.svc.probe = supervisor.ProbeFunc(readinessProbe(c))
	err := s.svc.WaitHealthy(ctx)
	s.svc.probe = saved
	if err != nil {
		return err
	}
	left := time.Minute
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	checks := box.HealthChecks(c, false, s.g.log)
	// The change that waits is the one its journal records as unfinished.
	checks.Release.Change = nil
	rep, err := health.Wait(ctx, checks, upgrade.GateChecks(c), left, 0)
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
	return err
}

// preUpgradeName starts the file name of every pre-upgrade archive.
const preUpgradeName = "pre-upgrade"

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
	c := d.cfg
	res, err := backup.Create(ctx, backup.Options{
		DataDir: c.Executor.DataDir, Paths: c.Backup.Paths, RuntimeDir: c.Executor.RuntimeDir, StateDir: c.Executor.StateDir,
		Dir: c.Backup.Dir, Name: preUpgradeName, Keep: c.Backup.Keep, Compression: backup.Compression(c.Backup.Compression),
		Encrypt: true, Passphrase: pass, Image: r.Image, Platform: r.Platform, PlatformDigest: r.Manifest,
		HbxVersion: buildinfo.Version, LockWait: c.Backup.LockWait, Services: heldServices{}, Logger: d.g.log,
	})
	if err != nil {
		return "", err
	}
	return res.Path, nil
}

// Recorded returns the digests archive's summary records.
func (d *upgradeData) Recorded(archive string) (digest.Digest, digest.Digest, error) {
	infos, err := backup.List(d.cfg.Backup.Dir, preUpgradeName)
	if err != nil {
		return "", "", err
	}
	for _, in := range infos {
		if in.Path == archive {
			return in.IndexDigest, in.ManifestDigest, nil
		}
	}
	if _, err := os.Stat(archive); err != nil {
		return "", "", err
	}
	return "", "", errors.New("the archive has no summary file (.json) to check its digests against")
}

// Restore restores archive with r's runtime installed through rt, and
// waits for the services (unless inSupervisor) judging r's tool set.
func (d *upgradeData) Restore(ctx context.Context, archive string, r upgrade.Release, rt upgrade.Installer) (string, error) {
	owner, err := lookupOwner(d.cfg.Executor.User)
	if err != nil {
		return "", err
	}
	c := d.cfg
	opts := backup.RestoreOptions{
		Archive: archive, Passphrase: d.passphrase, DataDir: c.Executor.DataDir, RuntimeDir: c.Executor.RuntimeDir,
		StateDir: c.Executor.StateDir, BackupDir: c.Backup.Dir, AllowedPaths: c.Backup.Paths, Owner: owner,
		KeepPreRestore: max(c.Backup.KeepPreRestore, 1), HealthWait: c.Backup.HealthWait, LockWait: c.Backup.LockWait,
		Runtime: rt, Image: r.Image, Platform: r.Platform, Logger: d.g.log,
	}
	if !d.inSupervisor {
		// The wait after the restore judges r's tool set (health.readiness
		// mcp-tools), which the rollback pinned with it.
		wc := *c
		wc.Health.MCPTools = upgrade.ToolsIn(c, r, d.toolsOverridden)
		svc, err := dialServices(ctx, d.g, &wc)
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
	return res.Restored[c.Executor.DataDir], nil
}

// watchedBox is upgrade.WatchedBox over cfg, the configuration of one
// round of hbx supervise's change watch.
type watchedBox struct {
	g   *globals
	cfg *config.Config
}

func (b watchedBox) Pending() error { return box.PendingChange(b.cfg) }
func (b watchedBox) Holder() (lock.Holder, bool) {
	return upgrade.LockHolder(b.cfg.Executor.RuntimeDir)
}
func (b watchedBox) RecoverChange(ctx context.Context) bool {
	return recoverUpgrade(ctx, b.g, b.cfg, true)
}

// RecoverRestore undoes an interrupted restore through the running
// supervisor, then waits (backup.health_wait) for the programs that
// should run, logging when they are not healthy.
func (b watchedBox) RecoverRestore(ctx context.Context) error {
	c, g := b.cfg, b.g
	if r, err := backup.ReadPendingRestore(c.Executor.DataDir); err != nil || r == nil {
		// Unreadable: nothing can be undone by it, nor the upgrade
		// behind it.
		return err
	}
	svc, err := dialServices(ctx, g, c)
	if err != nil {
		return err
	}
	opts := backup.RecoverOptions{DataDir: c.Executor.DataDir, RuntimeDir: c.Executor.RuntimeDir, Runtime: installRuntime{g: g, cfg: c}, Config: restorePinner{g: g, cfg: c}, Logger: g.log}
	if svc != nil {
		opts.Services = svc
		defer svc.Close()
	}
	msg, err := backup.Recover(ctx, opts)
	if err != nil || msg == "" {
		return err
	}
	g.log.Warn("interrupted restore recovered by the running supervisor", "what", msg)
	if svc != nil {
		// The programs that should run, also those FATAL on the mismatch
		// the restore left, start again.
		hctx, cancel := context.WithTimeout(ctx, c.Backup.HealthWait)
		defer cancel()
		if werr := svc.WaitHealthy(hctx); werr != nil {
			g.log.Error("after undoing the interrupted restore, the programs are not healthy", "err", werr)
		}
	}
	return nil
}

// watchSupervisor opens a supervisorwatch.Watch on c: a followed,
// discarded log stream of program, which the supervisor ends only when it
// exits or the watch closes it. When program is "" the watch never
// reports the supervisor gone.
func watchSupervisor(c *supervisor.Client, program string) *supervisorwatch.Watch {
	if program == "" {
		return supervisorwatch.Follow(nil)
	}
	return supervisorwatch.Follow(func(ctx context.Context) {
		_ = c.Logs(ctx, supervisor.LogsRequest{Name: program, Follow: true}, io.Discard)
	})
}
