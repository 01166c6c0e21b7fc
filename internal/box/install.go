package box

import (
	"context"
	"errors"
	"fmt"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/pinfile"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/upgrade"
)

// InstallOutcome is what a guarded install did: a plain install (Result),
// or a recorded release change with a pre-change backup (Switch).
type InstallOutcome struct {
	Result *installer.Result
	Switch *upgrade.Result
}

// GuardedInstall installs as opts says, except that the active release
// changes under existing data only through the upgrade path, as
// installer.Guard decides: a plain install, upgrade.Switch (stage,
// pre-change backup, journal, pin, activate; hbx rollback can undo it),
// or a refusal (installer.ErrChangeRefused). What runs is not asked when
// inSupervisor (the caller is the supervisor, before it starts anything).
// opts.Progress, opts.Logger (nil: b.Log) and opts.From go to the
// install or the stage; step, when not nil, is told the steps of a recorded change.
func (b Box) GuardedInstall(ctx context.Context, opts installer.Options, inSupervisor bool, step func(string)) (*InstallOutcome, error) {
	cfg := b.Config
	in := installer.GuardInput{DataDir: cfg.Executor.DataDir, CanBackUp: cfg.Backup.PassphraseFile != ""}
	if !inSupervisor {
		in.Runs = func() (string, error) { return payloadRuns(ctx, cfg) }
	}
	if aerr := backup.AwaitedRuntime(cfg.Executor.DataDir, cfg.Executor.RuntimeDir); errors.Is(aerr, backup.ErrRuntimeAwaited) && !awaitsImage(cfg, opts.Image) {
		return nil, fmt.Errorf("%w to %s: %w", installer.ErrChangeRefused, opts.Image, aerr)
	}
	change, err := installer.Guard(opts, in)
	if (change == installer.SwitchActive || errors.Is(err, installer.ErrChangeRefused)) && awaitsImage(cfg, opts.Image) {
		// The data was restored for this very release, without it: it
		// belongs to it already (nothing can run on it meanwhile), so
		// there is nothing to back up or roll back.
		change, err = installer.ReplaceActive, nil
	}
	if err != nil {
		return nil, err
	}
	if change != installer.SwitchActive {
		opts.KeepRelease = change == installer.KeepActive
		res, err := installer.Install(ctx, opts)
		if errors.Is(err, installer.ErrReleaseChange) {
			return nil, fmt.Errorf("%w: %w (it changed while this install started): run hbx install again", installer.ErrChangeRefused, err)
		}
		if ae := awaited(cfg); err != nil && ae != nil {
			// The failed install is the one the restored data waits for
			// (a --from file holding another release, say): name it.
			err = fmt.Errorf("%s, awaited by the data restored from %s: %w", ae.Image, ae.Archive, err)
		}
		return &InstallOutcome{Result: res}, err
	}
	return b.switchInstall(ctx, opts, inSupervisor, step)
}

// switchInstall changes the active release over existing data through
// upgrade.Switch, holding every program stopped (or the data lock, when
// no supervisor runs) unless the caller is the supervisor.
func (b Box) switchInstall(ctx context.Context, opts installer.Options, inSupervisor bool, step func(string)) (*InstallOutcome, error) {
	cfg := b.Config
	b.From = opts.From // the stage reads the image where opts says
	pass, err := b.Passphrase(false)()
	if err != nil {
		return nil, fmt.Errorf("pre-change backup: %w", err)
	}
	ref, err := installer.ParseReference(opts.Image)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = b.Log
	}
	uo := b.UpgradeOptions()
	uo.LockWait, uo.Logger, uo.Step = cfg.Backup.LockWait, log, step
	uo.Runtime = Runtime{box: b, progress: opts.Progress, log: log}
	uo.Data = &Data{box: b, pass: pass, inSupervisor: inSupervisor}
	uo.Config = releasePin{pinfile.File{Path: b.ConfigPath, Config: cfg, Sources: b.Sources}}
	if !inSupervisor {
		// A supervisor may run with Executor stopped: hold every program
		// stopped across the change, so none starts half-way.
		svc, err := b.Dial(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if svc != nil {
			uo.Services = &Services{svc: svc, box: b}
		} else {
			// Nothing may start the payload half-way through.
			unlock, err := b.LockUnsupervised(ctx, cfg, "hbx install")
			if err != nil {
				return nil, err
			}
			defer unlock()
		}
	}
	cur, _ := release.Current(cfg.Executor.RuntimeDir) // read by installer.Guard
	from := ""
	if cur != nil {
		from = cur.Meta.Image
	}
	log.Info("changing the active release over existing data, with a pre-change backup", "from", from, "to", opts.Image, "data", cfg.Executor.DataDir)
	sw, err := upgrade.Switch(ctx, uo, upgrade.Target{Image: opts.Image, Index: ref.Digest(), Pin: opts.PlatformDigest})
	if err != nil {
		return nil, err
	}
	return &InstallOutcome{Switch: sw}, nil
}

// InstallOnStart is the supervisor's install on start (Supervise.Install)
// for b: hbx install's, each layer's status told to progress; under
// existing data a release change goes through the upgrade path
// (pre-change backup, journal), or is refused (GuardedInstall in the
// supervisor). A registry it cannot reach gets hbx install's offline
// hint (OfflineHint).
func (b Box) InstallOnStart(ctx context.Context, progress func(string)) error {
	opts, err := InstallerOptions(ctx, b.Config, b.Log)
	if err != nil {
		return err
	}
	opts.Progress = installer.LayerStatus(progress)
	_, err = b.GuardedInstall(ctx, opts, true, nil)
	return OfflineHint(err, "", "hbx install")
}
