// Package supervise is `hbx supervise`'s start-up, as named steps
// (Supervise): the signals handled from the start, the programs checked,
// the data lock handed to the executor, the supervisor's own locks, the
// recovery of an interrupted restore and release change, the change
// watch, then the supervisor's Run; with the install on start
// (InstallOnStart: internal/guardedinstall in the supervisor) and the
// Hermes gateway's --external-supervisor flag probed once
// (hermesflag.go). The supervisor's options are internal/adapters's
// SuperviseOptions.
//
// It is a composer (internal/boundary's list), the top one under cmd/hbx:
// it calls internal/guardedinstall and internal/adapters, never the other way.
// It prints nothing; its logs go to the box's logger.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/hermesbox/hbx/internal/verbopts"

	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/adapters"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/internal/guardedinstall"
	"github.com/hermesbox/hbx/supervisor"
)

// Run is what hbx supervise runs with besides the box: the pieces the
// command layer owns.
type Run struct {
	// Reload reads the configuration again (see verbopts.Supervise.Reload; the
	// change watch reads each round's box from it too).
	Reload func() (*config.Config, error)
	// StateDir is the supervisor's state directory (its lock and the
	// programs' markers).
	StateDir string
	// LockData takes the data directory's lock as "hbx supervise",
	// stopping what a dead owner left.
	LockData func(ctx context.Context) (*datalock.Lock, error)
	// RecoverRestore undoes an interrupted restore, logging what it did;
	// it runs before any program starts. Its error (data restored without
	// its runtime, which is not installed) refuses the start.
	RecoverRestore func(ctx context.Context) error
}

// Supervise runs b's supervisor until a stop signal, as named steps:
// handle the signals that would end hbx from the start, check the
// programs (before the lock creates anything), take the data lock (the
// executor's processes inherit it), claim the supervisor's own locks
// (state directory and socket, so a second hbx supervise changes nothing),
// recover an interrupted restore and upgrade, start the change watch,
// then run. Errors are prefixed "supervise: "; ran is true once the
// supervisor's Run started its programs (its error is then no start-up
// error; one of Run before, a supervisor.StartError, is).
func Supervise(ctx context.Context, b adapters.Box, r Run) (ran bool, err error) {
	// Before the supervisor runs (the data lock, leftovers of a dead
	// supervisor, recovery of an interrupted restore or upgrade), the
	// signals that would end hbx mean what they mean to a running
	// supervisor: stop ones end this start, the others are logged and
	// ignored.
	ctx, early := supervisor.HandleEarlySignals(ctx, b.Log)
	defer early.Stop()
	opts := verbopts.Supervisor(verbopts.Supervise{Config: b.Config, Reload: r.Reload, Log: b.Log, Install: InstallOnStart(b)})
	opts.StateDir = r.StateDir
	opts.HandleSignals = true
	opts.Cgroups = true
	// Check the programs before the lock creates anything.
	if _, err := supervisor.New(opts); err != nil {
		return false, fmt.Errorf("supervise: %w", err)
	}
	withExternalSupervisorFlag(ctx, opts.Programs, b.Log)
	release, err := lockExecutorData(ctx, r.LockData, opts.Programs)
	if err != nil {
		return false, fmt.Errorf("supervise: %w", err)
	}
	defer release()
	s, err := supervisor.New(opts)
	if err != nil {
		return false, fmt.Errorf("supervise: %w", err)
	}
	// The supervisor's own locks (state directory and socket) before any
	// recovery: a second hbx supervise changes nothing, also when no
	// executor program holds the data lock.
	if err := s.Claim(); err != nil {
		return false, fmt.Errorf("supervise: %w", err)
	}
	// A start refused below lets go of the claim, as a refused Run does
	// (a held start keeps none); Run releases it itself.
	defer s.Unclaim()
	if err := r.RecoverRestore(ctx); err != nil {
		return false, fmt.Errorf("supervise: %w", err)
	}
	b.RecoverUpgrade(ctx, false)
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("supervise: stopped before any program started: %w", err)
	}
	// While it runs, a release change or restore whose command dies is
	// undone through it, not left serving unconfirmed. A recovery it runs
	// when the process exits is cut short, and its journal lets the next
	// start finish it.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go b.ChangeWatch(r.Reload).Run(wctx)
	early.Quiet() // Run handles every signal from here on
	if err := s.Run(ctx); err != nil {
		return !supervisor.IsStartError(err), fmt.Errorf("supervise: %w", err)
	}
	return true, nil
}

// lockExecutorData takes the data directory's lock with lock when
// programs include the executor (the single-writer rule: this supervisor
// owns the data directory for its whole life) and hands it to the
// executor's processes; release gives it back (a no-op without an
// executor program). Another hbx supervise holding it is also
// supervisor.ErrAlreadyRunning.
func lockExecutorData(ctx context.Context, lock func(context.Context) (*datalock.Lock, error), programs []supervisor.Program) (release func(), err error) {
	i := slices.IndexFunc(programs, func(p supervisor.Program) bool { return p.Name == config.ExecutorProgram })
	if i < 0 {
		return func() {}, nil
	}
	dl, err := lock(ctx)
	if err != nil {
		if be := (*datalock.BusyError)(nil); errors.As(err, &be) && !be.Leftovers && be.Owner.Command == "hbx supervise" {
			err = fmt.Errorf("%w: %w", supervisor.ErrAlreadyRunning, err)
		}
		return nil, err
	}
	programs[i].ExtraFiles = []*os.File{dl.File()}
	return func() { _ = dl.Release() }, nil
}

// InstallOnStart is the supervisor's install on start
// (verbopts.Supervise.Install) for b: hbx install's, each layer's status told
// to progress; under existing data a release change goes through the
// upgrade path (pre-change backup, journal), or is refused
// (guardedinstall.Install in the supervisor). A registry it cannot reach
// gets hbx install's offline hint (adapters.OfflineHint). A recorded
// change then prunes the releases as hbx install's does, and so does one
// that rolled itself back (adapters.Box.PruneReleasesLogged and
// PruneAfterFailure, without waiting for the lock; a failure is only
// logged, the start goes on).
func InstallOnStart(b adapters.Box) func(ctx context.Context, progress func(string)) error {
	return func(ctx context.Context, progress func(string)) error {
		opts, err := verbopts.Installer(ctx, b.Config, b.Log)
		if err != nil {
			return err
		}
		opts.Progress = installer.LayerStatus(progress)
		// Not rehearsed: nothing runs yet, so a rehearsal would keep no
		// box up, only boot the release once more before its real start
		// (at each retry); that start is judged by the same readiness
		// gate, and hbx rollback undoes the recorded change.
		out, err := guardedinstall.Install(ctx, b, opts, true, false, nil)
		if err == nil && out.Switch != nil {
			b.PruneReleasesLogged(ctx, adapters.SupervisorCommand, 0)
		}
		b.PruneAfterFailure(ctx, adapters.SupervisorCommand, 0, err)
		return adapters.OfflineHint(err, "", "hbx install")
	}
}
