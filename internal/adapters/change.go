package adapters

// The adapters of a release change (`hbx upgrade`, `hbx rollback`, the
// release change of `hbx install` and the change watch of `hbx
// supervise`): each fills one interface of package upgrade (or backup)
// with the installer, the supervisor, the health checks or package
// backup, and decides nothing (the decisions are upgrade's).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hermesbox/hbx/internal/verbopts"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/buildinfo"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/executorrun"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/pending"
	"github.com/hermesbox/hbx/internal/pinfile"
	"github.com/hermesbox/hbx/internal/supervisorwatch"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

// Supervised is a running supervisor seen by a change: backup.Services
// (a hold on every program, the waits), the watch that says it is gone,
// and its readiness probe, which a change swaps to judge the release it
// pinned.
type Supervised interface {
	backup.Services
	// Gone is closed once the supervisor is gone.
	Gone() <-chan struct{}
	// Close ends the watch's connection.
	Close()
	// SetProbe makes p the readiness probe of the waits and returns the
	// one it replaces.
	SetProbe(p supervisor.Probe) supervisor.Probe
}

// Hooks are the box's seams: the terminal the command layer gives it
// for a passphrase prompt, and the supervisor's services, the data lock
// and the restore's pieces, which New fills with the box's own (a test
// may replace them). Every hook but Terminal takes the configuration it
// acts on.
type Hooks struct {
	// Terminal opens the controlling terminal to ask for the backup
	// passphrase when backup.passphrase_file is not set.
	Terminal func() (backup.Terminal, func(), error)
	// Dial returns the supervisor on cfg's socket, nil (and no error)
	// when none runs.
	Dial func(ctx context.Context, cfg *config.Config) (Supervised, error)
	// Owner looks up the user that owns restored data.
	Owner func(user string) (backup.Owner, error)
	// LockUnsupervised takes the data directory's lock as command when no
	// supervisor runs; the func it returns gives it back.
	LockUnsupervised func(ctx context.Context, cfg *config.Config, command string) (func(), error)
	// RestoreRuntime installs an archive's release for a restore.
	RestoreRuntime func(cfg *config.Config) backup.Runtime
	// RestorePin is the config file's pin as a restore moves it.
	RestorePin func(cfg *config.Config) backup.Config
	// RecoverRestore undoes an interrupted restore before a change reads
	// the active release (svc: the running supervisor, or nil).
	RecoverRestore func(ctx context.Context, cfg *config.Config, srcs *config.Sources, svc Supervised) error
}

// changeWatchInterval is how often a running supervisor looks for a
// release change or restore whose command died.
const changeWatchInterval = time.Second

// Box is one box's configuration and the command layer's hooks; its
// methods compose the verbs for a release change.
type Box struct {
	Config     *config.Config
	Sources    *config.Sources // nil: no HBX_* variable or flag is known
	ConfigPath string          // the config file the pins are written to
	Log        *slog.Logger
	// From, when not "", is the OCI image layout directory or OCI
	// archive that the releases b stages (hbx upgrade --from) and a
	// restore's runtime step installs (hbx restore --from) are read from
	// instead of the registry (installer.Options.From). SwitchOptions
	// sets it from the guarded install's opts.From.
	From string
	Hooks
}

// with is b for another configuration of the same box (a re-read one,
// or one with a release pinned).
func (b Box) with(cfg *config.Config) Box {
	b.Config = cfg
	return b
}

// releaseOf describes an installed release for package upgrade.
func releaseOf(inst *release.Installed) upgrade.Release {
	m := inst.Meta
	return upgrade.Release{Target: m.Target()}
}

// UpgradeOptions are the upgrade.Options every change shares: the
// directories and waits, the installer, the pre-upgrade backup and the
// config file at b.ConfigPath.
func (b Box) UpgradeOptions() upgrade.Options {
	cfg := b.Config
	return upgrade.Options{
		RuntimeDir:     cfg.Executor.RuntimeDir,
		DataDir:        cfg.Executor.DataDir,
		KeepRolledBack: cfg.Backup.KeepPreRestore,
		HealthWait:     cfg.Backup.HealthWait,
		Runtime:        installerRuntime{box: b},
		Data:           &changeData{box: b},
		Config:         releasePin{pinfile.File{Path: b.ConfigPath, Config: cfg}},
		Logger:         b.Log,
	}
}

// ChangeOptions composes the installer, supervisor, health checks,
// backup and config file for `hbx upgrade` and `hbx rollback`. pass is
// the backup passphrase (nil: asked when needed); command names the
// caller in the lock (e.g. "hbx upgrade"); step, when not nil, is told
// each step. When no supervisor answers, the data directory's lock is
// taken and unlock releases it; unlock is never nil. An interrupted
// restore is undone first.
func (b Box) ChangeOptions(ctx context.Context, pass []byte, command string, step func(string)) (opts upgrade.Options, unlock func(), err error) {
	cfg := b.Config
	over := pinfile.File{Sources: b.Sources}.ToolsOverridden()
	opts = b.UpgradeOptions()
	opts.LockWait = cfg.Backup.LockWait
	opts.Data = &changeData{box: b, pass: pass, toolsOverridden: over}
	opts.Config = releasePin{pinfile.File{Path: b.ConfigPath, Config: cfg, Sources: b.Sources}}
	opts.Step = step
	svc, unlock, err := b.HoldForChange(ctx, &opts, command, over)
	if err != nil {
		return opts, unlock, err
	}
	// An interrupted restore is undone first, its runtime and pin too, so
	// the upgrade or rollback reads the release the data belongs to.
	if err := b.RecoverRestore(ctx, cfg, b.Sources, svc); err != nil {
		unlock()
		return opts, func() {}, err
	}
	return opts, unlock, nil
}

// HoldForChange makes the data safe for a release change by command:
// the running supervisor fills opts.Services (the change holds every
// program stopped through it; svc is that supervisor), or, when none
// answers, the data directory's lock is taken (svc is nil) and unlock
// gives it back. unlock is never nil. toolsOverridden: an HBX_* variable
// or a flag sets health.mcp_tools.
func (b Box) HoldForChange(ctx context.Context, opts *upgrade.Options, command string, toolsOverridden bool) (svc Supervised, unlock func(), err error) {
	svc, err = b.Dial(ctx, b.Config)
	if err != nil {
		return nil, func() {}, err
	}
	if svc != nil {
		opts.Services = &changeServices{svc: svc, box: b, toolsOverridden: toolsOverridden}
		return svc, func() {}, nil
	}
	unlock, err = b.LockUnsupervised(ctx, b.Config, command)
	if err != nil {
		return nil, func() {}, err
	}
	return nil, unlock, nil
}

// SwitchOptions are the upgrade.Options of an install that changes the
// active release over existing data (upgrade.Switch): UpgradeOptions
// with the stage reading from from (an OCI layout or archive; "": the
// registry) and telling progress, log for the change's logs (nil:
// b.Log), pass for the pre-change backup, the config file's pin with
// b.Sources, and inSupervisor (the caller is hbx supervise's install on
// start, before its programs run: the restore of a rollback does not dial
// it). step, when not nil, is told each step.
func (b Box) SwitchOptions(from string, pass []byte, progress installer.Progress, log *slog.Logger, inSupervisor bool, step func(string)) upgrade.Options {
	if log == nil {
		log = b.Log
	}
	b.From = from
	uo := b.UpgradeOptions()
	uo.LockWait, uo.Logger, uo.Step = b.Config.Backup.LockWait, log, step
	uo.Runtime = installerRuntime{box: b, progress: progress, log: log}
	uo.Data = &changeData{box: b, pass: pass, inSupervisor: inSupervisor}
	uo.Config = releasePin{pinfile.File{Path: b.ConfigPath, Config: b.Config, Sources: b.Sources}}
	return uo
}

// RecoverUpgrade finishes or undoes an interrupted upgrade: before `hbx
// supervise` starts the programs (no supervisor runs yet), or, with
// running, from the running supervisor (its change watch), through it.
// It logs what it did and returns whether it failed. A recovery that did
// something then prunes the releases as the interrupted command would
// have (PruneReleasesLogged, without waiting for the lock; its failure is
// only logged).
func (b Box) RecoverUpgrade(ctx context.Context, running bool) bool {
	msg, err := upgrade.Recover(ctx, b.UpgradeOptions())
	switch {
	case err != nil && running:
		b.Log.Error("an interrupted upgrade could not be recovered; retrying", "err", err)
	case err != nil:
		b.Log.Error("an interrupted upgrade could not be recovered; starting the programs anyway", "err", err)
	case msg != "" && running:
		b.Log.Warn("interrupted upgrade recovered by the running supervisor", "what", msg)
	case msg != "":
		b.Log.Warn("interrupted upgrade recovered", "what", msg)
	}
	if err == nil && msg != "" {
		b.PruneReleasesLogged(ctx, SupervisorCommand, 0)
	}
	return err != nil
}

// installerRuntime is upgrade.Runtime over the installer; progress and log, when
// set, go to Stage's install.
type installerRuntime struct {
	box      Box
	progress installer.Progress
	log      *slog.Logger
}

// Active is the release `current` names.
func (r installerRuntime) Active() (upgrade.Release, error) { return r.link(release.CurrentLink) }

// Previous is the release `previous` names.
func (r installerRuntime) Previous() (upgrade.Release, error) { return r.link(release.PreviousLink) }

func (r installerRuntime) link(name string) (upgrade.Release, error) {
	inst, err := release.Link(r.box.Config.Executor.RuntimeDir, name)
	if err != nil {
		return upgrade.Release{}, err
	}
	return releaseOf(inst), nil
}

// Stage installs image with the child manifest pin without activating it.
func (r installerRuntime) Stage(ctx context.Context, image string, pin digest.Digest) (upgrade.Release, upgrade.Transfer, error) {
	opts, err := verbopts.Installer(ctx, r.box.Config, r.box.Log)
	if err != nil {
		return upgrade.Release{}, upgrade.Transfer{}, err
	}
	opts.Image, opts.PlatformDigest, opts.StageOnly = image, pin, true
	opts.From, opts.Progress = r.box.From, r.progress
	if r.log != nil {
		opts.Logger = r.log
	}
	res, err := installer.Install(ctx, opts)
	if err != nil {
		return upgrade.Release{}, upgrade.Transfer{}, err
	}
	return releaseOf(res.Release), upgrade.Transfer{Fetched: res.Fetched, Reused: res.Reused, FetchedBytes: res.FetchedBytes, ReusedBytes: res.ReusedBytes, Location: res.Location}, nil
}

// Activate makes the staged release manifest names the active one.
func (r installerRuntime) Activate(ctx context.Context, manifest digest.Digest) error {
	c := r.box.Config
	return installer.Activate(ctx, c.Executor.RuntimeDir, manifest, c.Install.LockWait)
}

// SetPrevious points previous at the published release of manifest, or
// removes it (release.SetPrevious).
func (r installerRuntime) SetPrevious(_ context.Context, manifest digest.Digest) (bool, error) {
	hex := ""
	if manifest != "" {
		if err := manifest.Validate(); err != nil {
			return false, fmt.Errorf("previous: manifest digest: %w", err)
		}
		hex = manifest.Encoded()
	}
	return release.SetPrevious(r.box.Config.Executor.RuntimeDir, hex)
}

// reactivating is the backup.Runtime of a rollback's restore: a release
// the runtime directory holds as current or previous is reactivated in
// place with no network (installer.Reactivate); any other is installed
// by install (hbx install's, with the rollback's release pinned).
type reactivating struct {
	install    backup.Runtime
	runtimeDir string
	wait       time.Duration // for the runtime directory's lock
}

// Install implements backup.Runtime; see reactivating.
func (r reactivating) Install(ctx context.Context, image, platform string, manifest digest.Digest) (bool, error) {
	if ref, err := release.ParseImageRef(image); err == nil {
		want := release.Target{Image: image, IndexDigest: ref.Digest, Platform: platform, ManifestDigest: manifest}
		held, changed, err := installer.Reactivate(ctx, r.runtimeDir, want, r.wait)
		if held || err != nil {
			return changed, err
		}
	}
	return r.install.Install(ctx, image, platform, manifest)
}

// changeServices is upgrade.Services over the supervisor and the checks of
// `hbx health`.
type changeServices struct {
	svc Supervised
	box Box
	// toolsOverridden: an HBX_* variable or a flag sets health.mcp_tools,
	// which then wins over the tool set pinned with a release.
	toolsOverridden bool
}

// Hold stops every program and keeps them stopped until released.
func (s *changeServices) Hold(ctx context.Context) (upgrade.Hold, error) {
	return s.svc.Hold(ctx)
}

// Gone is closed once the supervisor is gone (upgrade.Watcher).
func (s *changeServices) Gone() <-chan struct{} { return s.svc.Gone() }

// WaitHealthy waits for the programs, then for the checks
// health.readiness names (api-health by default), mcp-auth, supervisor
// and release (pinned to r), and mcp-tools (the tool set pinned with r)
// when a key is configured.
func (s *changeServices) WaitHealthy(ctx context.Context, r upgrade.Release) error {
	c := withPin(s.box.Config, r)
	c.Health.MCPTools = toolsIn(s.box.Config, r, s.toolsOverridden)
	// The readiness wait judges r's tool set too (health.readiness
	// mcp-tools).
	saved := s.svc.SetProbe(supervisor.ProbeFunc(verbopts.ReadinessProbe(c)))
	err := s.svc.WaitHealthy(ctx)
	s.svc.SetProbe(saved)
	if err != nil {
		return err
	}
	left := time.Minute
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	checks := verbopts.Health(c, false, s.box.Log)
	// The change that waits is the one its journal records as unfinished.
	checks.Release.Change = nil
	rep, err := health.Wait(ctx, checks, gateChecks(c), left, 0)
	if err != nil && rep == nil {
		return err
	}
	var failed []string
	hint := ""
	for _, c := range rep.Checks {
		if c.Status == health.Fail {
			failed = append(failed, fmt.Sprintf("%s (%s)", c.Name, c.Reason))
		}
		if tools, ok := health.ListedTools(c.Cause()); ok {
			hint = toolSetHint(r, tools)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: checks failing: %s%s", health.ErrUnhealthy, strings.Join(failed, "; "), hint)
	}
	return err
}

// toolSetHint tells, after the checks failing, how to pin the tool set
// r's MCP server lists (tools, its order) instead of the one expected:
// the flag of hbx upgrade that accepts it.
func toolSetHint(r upgrade.Release, tools []string) string {
	return fmt.Sprintf("; the image lists another MCP tool set: if that set is its own, pin it with hbx upgrade --image %s --mcp-tools %s",
		r.Image, strings.Join(tools, ","))
}

// PreUpgradeName starts the file name of every pre-upgrade archive.
const PreUpgradeName = config.PreUpgradeArchiveName // backup.name may not be it

// changeData is upgrade.Data over package backup.
type changeData struct {
	box  Box
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

func (d *changeData) passphrase() ([]byte, error) {
	if d.pass != nil {
		return d.pass, nil
	}
	p, err := d.box.Passphrase(false)()
	if err != nil {
		return nil, err
	}
	d.pass = p
	return p, nil
}

// Backup takes the pre-upgrade backup of r's data while the upgrade
// holds the programs stopped, leaving spare ("" none) whatever
// backup.keep says (upgrade.Data); it returns the archive's path.
func (d *changeData) Backup(ctx context.Context, r upgrade.Release, spare string) (string, error) {
	pass, err := d.passphrase()
	if err != nil {
		return "", err
	}
	opts := verbopts.Backup(d.box.Config)
	opts.Name, opts.Passphrase, opts.Image, opts.Platform, opts.PlatformDigest = PreUpgradeName, pass, r.Image, r.Platform, r.ManifestDigest
	opts.HbxVersion, opts.Services, opts.Logger = buildinfo.Version, heldServices{}, d.box.Log
	if spare != "" {
		opts.Spare = []string{spare}
	}
	res, err := backup.Create(ctx, opts)
	if err != nil {
		return "", err
	}
	return res.Path, nil
}

// Recorded returns the digests archive's summary records.
func (d *changeData) Recorded(archive string) (digest.Digest, digest.Digest, error) {
	infos, err := backup.List(d.box.Config.Backup.Dir, PreUpgradeName)
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

// Restore restores archive with r's runtime reactivated in place or
// installed (reactivating), and waits for the services (unless
// inSupervisor) judging r's tool set.
func (d *changeData) Restore(ctx context.Context, archive string, r upgrade.Release) (upgrade.Kept, error) {
	c := d.box.Config
	if err := executorrun.EnsureUser(ctx, c.Executor.User, d.box.Log); err != nil {
		return upgrade.Kept{}, err
	}
	owner, err := d.box.Owner(c.Executor.User)
	if err != nil {
		return upgrade.Kept{}, err
	}
	opts := verbopts.Restore(c, archive)
	opts.Passphrase, opts.Owner, opts.KeepPreRestore, opts.Image, opts.Platform, opts.Logger = d.passphrase, owner, max(c.Backup.KeepPreRestore, 1), r.Image, r.Platform, d.box.Log
	// The data the release rolled back from wrote goes straight to a
	// rolled-back copy in the swap: no second rename that could fail and
	// leave it a pre-restore copy a later restore prunes.
	opts.KeepAs = datadir.RolledBack
	opts.Runtime = reactivating{install: d.box.RestoreRuntime(withPin(c, r)), runtimeDir: c.Executor.RuntimeDir, wait: c.Install.LockWait}
	if !d.inSupervisor {
		// The wait after the restore judges r's tool set (health.readiness
		// mcp-tools), which the rollback pinned with it.
		wc := *c
		wc.Health.MCPTools = toolsIn(c, r, d.toolsOverridden)
		svc, err := d.box.Dial(ctx, &wc)
		if err != nil {
			return upgrade.Kept{}, err
		}
		if svc != nil {
			defer svc.Close()
			opts.Services = svc
		}
	}
	res, err := backup.Restore(ctx, opts)
	if err != nil {
		return upgrade.Kept{}, err
	}
	kept := upgrade.Kept{Data: res.Restored[c.Executor.DataDir], Extra: map[string]string{}}
	for dir, p := range res.Restored {
		if dir != c.Executor.DataDir && p != "" {
			kept.Extra[dir] = p
		}
	}
	return kept, nil
}

// watched is upgrade.WatchedBox over b, the configuration of one round
// of hbx supervise's change watch.
func (b Box) watched() upgrade.WatchedBox { return watchedBox{b} }

// ChangeWatch is hbx supervise's watch for a release change or restore
// whose command died (every changeWatchInterval), each round over the
// configuration reload reads (b's when it fails).
func (b Box) ChangeWatch(reload func() (*config.Config, error)) upgrade.ChangeWatch {
	return upgrade.ChangeWatch{Interval: changeWatchInterval, Logger: b.Log, Box: func() upgrade.WatchedBox {
		if c, err := reload(); err == nil {
			return b.with(c).watched()
		}
		return b.watched()
	}}
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

type watchedBox struct{ b Box }

func (w watchedBox) Pending() error { return pending.Change(w.b.Config) }
func (w watchedBox) Holder() (lock.Holder, bool) {
	return upgrade.LockHolder(w.b.Config.Executor.RuntimeDir)
}
func (w watchedBox) RecoverChange(ctx context.Context) bool { return w.b.RecoverUpgrade(ctx, true) }

// RecoverRestore undoes an interrupted restore through the running
// supervisor, then waits (backup.health_wait) for the programs that
// should run, logging when they are not healthy, and prunes the releases
// as the interrupted restore would have (PruneReleasesLogged; its failure is
// only logged).
func (w watchedBox) RecoverRestore(ctx context.Context) error {
	b, c := w.b, w.b.Config
	if r, err := backup.ReadPendingRestore(c.Executor.DataDir); err != nil || r == nil {
		// Unreadable: nothing can be undone by it, nor the upgrade
		// behind it.
		return err
	} else if r.NotStarted() && backup.AwaitedRuntime(c.Executor.DataDir, c.Executor.RuntimeDir) != nil {
		// Restored without its runtime, still missing: nothing to do
		// until it is installed (then Recover finishes it below).
		return nil
	}
	svc, err := b.Dial(ctx, c)
	if err != nil {
		return err
	}
	opts := verbopts.Recover(c)
	opts.Runtime, opts.Config, opts.Logger = b.RestoreRuntime(c), b.RestorePin(c), b.Log
	if svc != nil {
		opts.Services = svc
		defer svc.Close()
	}
	msg, err := backup.Recover(ctx, opts)
	if err != nil || msg == "" {
		return err
	}
	b.Log.Warn("interrupted restore recovered by the running supervisor", "what", msg)
	if svc != nil {
		// The programs that should run, also those FATAL on the mismatch
		// the restore left, start again.
		hctx, cancel := context.WithTimeout(ctx, c.Backup.HealthWait)
		defer cancel()
		if werr := svc.WaitHealthy(hctx); werr != nil {
			b.Log.Error("after undoing the interrupted restore, the programs are not healthy", "err", werr)
		}
	}
	b.PruneReleasesLogged(ctx, SupervisorCommand, 0)
	return nil
}
