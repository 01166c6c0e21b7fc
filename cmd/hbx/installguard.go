package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

// errChangeRefused: an install would change the active release under
// data it cannot protect.
var errChangeRefused = errors.New("refuse to change the active release")

// installOutcome is what a guarded install did: a plain install (res), or
// a recorded release change with a pre-change backup (sw).
type installOutcome struct {
	res *installer.Result
	sw  *upgrade.Result
}

// guardedInstall installs as opts says, except that the active release
// changes under existing data only through the upgrade path:
//
//   - no active release (first install), or the active one is the
//     configured one (warm no-op, --verify repair), or it cannot be read
//     but current names the pinned manifest (repair): a plain install;
//   - it cannot be read and is not the pinned one: refused while a
//     payload runs or the data directory holds data (unknownActiveInstall);
//   - otherwise, while a payload runs (the data directory's lock is held,
//     or the supervisor reports executor in any state but STOPPED, EXITED
//     or FATAL): refused, pointing to hbx upgrade (not checked when
//     inSupervisor: the caller is the supervisor, before it starts
//     anything);
//   - the data directory is empty or absent: a plain install;
//   - it holds data: upgrade.Switch (stage, pre-change backup, journal,
//     pin, activate) when backup.passphrase_file is set, so hbx rollback
//     can undo it; refused otherwise.
//
// progress and log (nil: g.log) go to the install or the stage; step,
// when not nil, is told the steps of a recorded change.
func guardedInstall(ctx context.Context, g *globals, cfg *config.Config, srcs *config.Sources, opts installer.Options, inSupervisor bool, step func(string)) (*installOutcome, error) {
	opts.KeepRelease = true
	cur, err := release.Current(cfg.Executor.RuntimeDir)
	if err != nil && !unknownActive(cfg.Executor.RuntimeDir, opts) || err == nil && sameRelease(cur, opts) {
		// No release (first install), an unreadable one that is the
		// pinned one (repaired in place), or the configured one: nothing
		// changes under the data.
		res, err := installer.Install(ctx, opts)
		if errors.Is(err, installer.ErrReleaseChange) {
			return nil, fmt.Errorf("%w: %w (it changed while this install started): run hbx install again", errChangeRefused, err)
		}
		return &installOutcome{res: res}, err
	}
	if err != nil {
		return unknownActiveInstall(ctx, cfg, opts, inSupervisor, err)
	}
	from, to := cur.Meta.Image, opts.Image
	if !inSupervisor {
		why, err := payloadRuns(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if why != "" {
			return nil, fmt.Errorf("%w from %s to %s while Executor runs (%s): use hbx upgrade --image %s, which backs the data up first and can be rolled back", errChangeRefused, from, to, why, to)
		}
	}
	data, err := hasData(cfg.Executor.DataDir)
	if err != nil {
		return nil, err
	}
	if !data {
		opts.KeepRelease = false
		res, err := installer.Install(ctx, opts)
		return &installOutcome{res: res}, err
	}
	if cfg.Backup.PassphraseFile == "" {
		return nil, fmt.Errorf("%w from %s to %s over the data in %s without a pre-change backup: set backup.passphrase_file (install then backs the data up first and hbx rollback can undo the change), or use hbx upgrade --image %s", errChangeRefused, from, to, cfg.Executor.DataDir, to)
	}
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
	log.Info("changing the active release over existing data, with a pre-change backup", "from", from, "to", to, "data", cfg.Executor.DataDir)
	sw, err := upgrade.Switch(ctx, uo, upgrade.Target{Image: opts.Image, Index: ref.Digest(), Pin: opts.PlatformDigest})
	if err != nil {
		return nil, err
	}
	return &installOutcome{sw: sw}, nil
}

// sameRelease reports whether cur is the release opts installs (by
// identity: index, platform, pinned manifest).
func sameRelease(cur *release.Installed, opts installer.Options) bool {
	ref, err := installer.ParseReference(opts.Image)
	if err != nil {
		return true // Install reports the bad reference
	}
	plat, err := installer.ParsePlatform(opts.Platform)
	if err != nil {
		return true
	}
	return cur.Meta.Matches(ref.Digest(), plat.String(), opts.PlatformDigest) == nil
}

// payloadRuns says what runs on cfg's data directory, "" when nothing.
// A supervisor on the configured socket holds the data lock for its whole
// life, so when one answers its executor's state decides (anything but
// STOPPED, EXITED or FATAL runs); otherwise the data lock does (hbx run
// executor, a supervisor on another socket, leftovers of a dead one).
func payloadRuns(ctx context.Context, cfg *config.Config) (string, error) {
	c, err := supervisor.Dial(ctx, cfg.Supervisor.Socket)
	if errors.Is(err, supervisor.ErrNotRunning) {
		if err := datalock.Check(cfg.Executor.DataDir); errors.Is(err, datalock.ErrBusy) {
			return err.Error(), nil
		} else if err != nil {
			return "", err
		}
		return "", nil
	}
	if err != nil {
		return "", err
	}
	sts, err := c.Status(ctx)
	if err != nil {
		return "", fmt.Errorf("ask the supervisor on %s whether Executor runs: %w", cfg.Supervisor.Socket, err)
	}
	for _, st := range sts {
		if st.Name != config.ExecutorProgram {
			continue
		}
		switch st.State {
		case supervisor.Stopped, supervisor.Exited, supervisor.Fatal:
			return "", nil
		}
		return fmt.Sprintf("the supervisor on %s reports executor %s", cfg.Supervisor.Socket, st.State), nil
	}
	return "", nil
}

// hasData reports whether dir exists and has entries.
func hasData(dir string) (bool, error) {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read data directory: %w", err)
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read data directory %s: %w", dir, err)
	}
	return true, nil
}

// unknownActive reports whether the runtime directory's current link
// names a release (releases/<manifest hex>, present or not) that cannot
// be read and is not the pinned manifest of opts: then whether an install
// changes the runtime under the data cannot be told.
func unknownActive(runtimeDir string, opts installer.Options) bool {
	target, err := os.Readlink(filepath.Join(runtimeDir, release.CurrentLink))
	if err != nil {
		return false // no current link: a first install
	}
	return opts.PlatformDigest == "" || target != release.ReleasesDir+"/"+opts.PlatformDigest.Encoded()
}

// unknownActiveInstall installs over an active release that cannot be
// read (cerr) and is not the pinned one: refused while a payload runs or
// when the data directory holds data (the release the data was written by
// is unknown, so no pre-change backup can be recorded against it); a
// plain install otherwise.
func unknownActiveInstall(ctx context.Context, cfg *config.Config, opts installer.Options, inSupervisor bool, cerr error) (*installOutcome, error) {
	if !inSupervisor {
		why, err := payloadRuns(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if why != "" {
			return nil, fmt.Errorf("%w to %s while Executor runs (%s): the active release cannot be read (%w); use hbx upgrade --image %s once it is repaired", errChangeRefused, opts.Image, why, cerr, opts.Image)
		}
	}
	data, err := hasData(cfg.Executor.DataDir)
	if err != nil {
		return nil, err
	}
	if data {
		return nil, fmt.Errorf("%w to %s over the data in %s: the active release cannot be read (%w) and is not the pinned one, so the runtime the data was written by is unknown; pin that release's manifest in executor.platform_digests and run hbx install to repair it, then hbx upgrade --image %s", errChangeRefused, opts.Image, cfg.Executor.DataDir, cerr, opts.Image)
	}
	opts.KeepRelease = false
	res, err := installer.Install(ctx, opts)
	return &installOutcome{res: res}, err
}
