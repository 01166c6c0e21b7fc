// Package guardedinstall is `hbx install` and the supervisor's install on
// start under existing data: installer.Guard decides, then a plain install
// (installer.Install) or a recorded release change through
// upgrade.Switch (stage, rehearsal for hbx install, pre-change backup,
// journal, pin, activate; hbx rollback can undo it), or a refusal (installer.ErrChangeRefused). Data
// restored without its runtime (backup.AwaitedRuntime) takes only that
// runtime, as a plain install.
//
// It is a composer (internal/boundary's list) above internal/adapters, whose
// adapters it fills upgrade.Switch's options with; it prints nothing.
package guardedinstall

import (
	"context"
	"errors"
	"fmt"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/adapters"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/internal/prune"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

// Outcome is what a guarded install did: a plain install (Result), or a
// recorded release change with a pre-change backup (Switch).
type Outcome struct {
	Result *installer.Result
	Switch *upgrade.Result
}

// Install installs as opts says on b's box, except that the active release
// changes under existing data only through the upgrade path, as
// installer.Guard decides: a plain install, upgrade.Switch (stage,
// pre-change backup, journal, pin, activate; hbx rollback can undo it),
// or a refusal (installer.ErrChangeRefused); refused, nothing changed,
// while an upgrade is half done (upgrade.ErrHalfDone, checked again under
// the runtime directory's lock), and its cleanup keeps the releases an
// unfinished restore or release change records. What runs is not asked when
// inSupervisor (the caller is the supervisor, before it starts anything).
// With rehearse (hbx install without --no-rehearsal), a recorded change
// first boots the staged release on a copy of the data (b.Rehearsal, as
// hbx upgrade does): a release that would not come up is refused
// (rehearse.ErrRefused) before anything is held, backed up, pinned or
// activated. The supervisor's install on start passes false: see
// docs/install.md#under-existing-data.
// opts.Progress, opts.Logger (nil: b.Log) and opts.From go to the
// install or the stage; step, when not nil, is told the steps of a recorded change.
func Install(ctx context.Context, b adapters.Box, opts installer.Options, inSupervisor, rehearse bool, step func(string)) (*Outcome, error) {
	cfg := b.Config
	in := installer.GuardInput{DataDir: cfg.Executor.DataDir, CanBackUp: cfg.Backup.PassphraseFile != ""}
	if !inSupervisor {
		in.Runs = func() (string, error) { return payloadRuns(ctx, cfg) }
	}
	// An unfinished upgrade is recovered first (hbx rollback, hbx
	// supervise's start, which recovers before its install on start):
	// refused here before anything, and again under the lock.
	if err := upgrade.HalfDone(cfg.Executor.RuntimeDir, false); err != nil {
		return nil, fmt.Errorf("%w; nothing changed", err)
	}
	opts.Refuse = func() error {
		if err := upgrade.HalfDone(cfg.Executor.RuntimeDir, true); err != nil {
			return fmt.Errorf("%w; nothing changed", err)
		}
		return nil
	}
	opts.Keep = keepNeeded(cfg)
	if aerr := backup.AwaitedRuntime(cfg.Executor.DataDir, cfg.Executor.RuntimeDir); errors.Is(aerr, backup.ErrRuntimeAwaited) && !adapters.AwaitsImage(cfg, opts.Image) {
		return nil, fmt.Errorf("%w to %s: %w", installer.ErrChangeRefused, opts.Image, aerr)
	}
	change, err := installer.Guard(opts, in)
	if (change == installer.SwitchActive || errors.Is(err, installer.ErrChangeRefused)) && adapters.AwaitsImage(cfg, opts.Image) {
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
		if ae := adapters.Awaited(cfg); err != nil && ae != nil {
			// The failed install is the one the restored data waits for
			// (a --from file holding another release, say): name it.
			err = fmt.Errorf("%s, awaited by the data restored from %s: %w", ae.Image, ae.Archive, err)
		}
		return &Outcome{Result: res}, err
	}
	return switchInstall(ctx, b, opts, inSupervisor, rehearse, step)
}

// switchInstall changes the active release over existing data through
// upgrade.Switch, rehearsed first when rehearse, holding every program
// stopped (or the data lock, when no supervisor runs) unless the caller
// is the supervisor.
func switchInstall(ctx context.Context, b adapters.Box, opts installer.Options, inSupervisor, rehearse bool, step func(string)) (*Outcome, error) {
	cfg := b.Config
	pass, err := b.Passphrase(false)()
	if err != nil {
		return nil, fmt.Errorf("pre-change backup: %w", err)
	}
	ref, err := installer.ParseReference(opts.Image)
	if err != nil {
		return nil, err
	}
	uo := b.SwitchOptions(opts.From, pass, opts.Progress, opts.Logger, inSupervisor, step)
	if !inSupervisor {
		// A supervisor may run with Executor stopped: hold every program
		// stopped across the change, so none starts half-way; without
		// one, nothing may start the payload half-way through.
		_, unlock, err := b.HoldForChange(ctx, &uo, "hbx install", false)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	if rehearse {
		uo.Rehearse = b.Rehearsal(uo.Services)
	}
	cur, _ := release.Current(cfg.Executor.RuntimeDir) // read by installer.Guard
	from := ""
	if cur != nil {
		from = cur.Meta.Image
	}
	uo.Logger.Info("changing the active release over existing data, with a pre-change backup", "from", from, "to", opts.Image, "data", cfg.Executor.DataDir)
	sw, err := upgrade.Switch(ctx, uo, upgrade.Target{Target: release.Target{Image: opts.Image, IndexDigest: ref.Digest(), ManifestDigest: opts.PlatformDigest}})
	if err != nil {
		return nil, err
	}
	return &Outcome{Switch: sw}, nil
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

// keepNeeded is an install's installer.Options.Keep on cfg's box: the
// releases an unfinished restore or release change records
// (prune.Needed), read when the cleanup runs; every release when they
// cannot be read.
func keepNeeded(cfg *config.Config) func(release.Meta) bool {
	return func(m release.Meta) bool {
		need, err := prune.Needed(cfg.Executor.RuntimeDir, cfg.Executor.DataDir)
		return err != nil || prune.Keep(need)(m)
	}
}
