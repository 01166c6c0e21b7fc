package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/box"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/upgrade"
)

// installOutcome is what a guarded install did: a plain install (res), or
// a recorded release change with a pre-change backup (sw).
type installOutcome struct {
	res *installer.Result
	sw  *upgrade.Result
}

// guardedInstall installs as opts says, except that the active release
// changes under existing data only through the upgrade path, as
// installer.Guard decides: a plain install, upgrade.Switch (stage,
// pre-change backup, journal, pin, activate; hbx rollback can undo it),
// or a refusal. What runs is not asked when inSupervisor (the caller is
// the supervisor, before it starts anything). progress and log (nil:
// g.log) go to the install or the stage; step, when not nil, is told the
// steps of a recorded change.
func guardedInstall(ctx context.Context, g *globals, cfg *config.Config, srcs *config.Sources, opts installer.Options, inSupervisor bool, step func(string)) (*installOutcome, error) {
	in := installer.GuardInput{DataDir: cfg.Executor.DataDir, CanBackUp: cfg.Backup.PassphraseFile != ""}
	if !inSupervisor {
		in.Runs = func() (string, error) { return box.PayloadRuns(ctx, cfg) }
	}
	change, err := installer.Guard(opts, in)
	if err != nil {
		return nil, err
	}
	if change != installer.SwitchActive {
		opts.KeepRelease = change == installer.KeepActive
		res, err := installer.Install(ctx, opts)
		if errors.Is(err, installer.ErrReleaseChange) {
			return nil, fmt.Errorf("%w: %w (it changed while this install started): run hbx install again", installer.ErrChangeRefused, err)
		}
		return &installOutcome{res: res}, err
	}
	return switchInstall(ctx, g, cfg, srcs, opts, inSupervisor, step)
}

// switchInstall changes the active release over existing data through
// upgrade.Switch, holding every program stopped (or the data lock, when
// no supervisor runs) unless the caller is the supervisor.
func switchInstall(ctx context.Context, g *globals, cfg *config.Config, srcs *config.Sources, opts installer.Options, inSupervisor bool, step func(string)) (*installOutcome, error) {
	pass, err := passphrase(cfg, false)()
	if err != nil {
		return nil, fmt.Errorf("pre-change backup: %w", err)
	}
	ref, err := installer.ParseReference(opts.Image)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = g.log
	}
	uo := upgrade.Options{
		RuntimeDir:     cfg.Executor.RuntimeDir,
		DataDir:        cfg.Executor.DataDir,
		KeepRolledBack: cfg.Backup.KeepPreRestore,
		LockWait:       cfg.Backup.LockWait,
		HealthWait:     cfg.Backup.HealthWait,
		Runtime:        upgradeRuntime{g: g, cfg: cfg, progress: opts.Progress, log: log},
		Data:           &upgradeData{g: g, cfg: cfg, pass: pass, inSupervisor: inSupervisor},
		Config:         upgrade.ConfigFile{Path: g.configPath, Cfg: cfg, Sources: srcs},
		Logger:         log,
		Step:           step,
	}
	if !inSupervisor {
		// A supervisor may run with Executor stopped: hold every program
		// stopped across the change, so none starts half-way.
		svc, err := dialServices(ctx, g, cfg)
		if err != nil {
			return nil, err
		}
		if svc != nil {
			uo.Services = &upgradeServices{svc: svc, g: g, cfg: cfg}
		} else {
			// Nothing may start the payload half-way through.
			unlock, err := lockDataUnsupervised(ctx, g, cfg, nil, "hbx install")
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
	return &installOutcome{sw: sw}, nil
}
