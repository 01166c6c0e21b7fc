package backup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/internal/lock"
)

// restoreRun is one Restore under way: its options, what it learned and
// what it changed so far, so that each step is a method and each deferred
// undo sees the state.
type restoreRun struct {
	opts  RestoreOptions
	log   *slog.Logger
	prog  Progress
	now   func() time.Time
	start time.Time
	res   *RestoreResult

	ar      *reader
	m       *Manifest // the manifest, its release as plan decided it
	plan    *RestorePlan
	roots   []*restoreRoot
	pinPlan *journalPin // what the restore pins (planPin), nil: nothing
	j       *journal
	// staged: the journal and staging trees are no longer ours to remove
	// on failure (the journal undoes them, or keeps them for the next
	// start).
	staged bool
	hold   Hold
	// released: the hold is released (or there was none).
	released bool
	// without: the archive's runtime could not be installed and the
	// restore goes on without it (mayGoWithout).
	without bool
	// undoCtx keeps ctx's values without its cancellation: undoing must
	// finish even when ctx is cancelled (Ctrl-C, SIGTERM).
	undoCtx context.Context
}

// newRestoreRun checks opts: clean absolute directories, and an owner
// other than the caller only as root.
func newRestoreRun(opts RestoreOptions) (*restoreRun, error) {
	r := &restoreRun{start: time.Now()}
	r.log, r.prog, r.now = defaults(opts.Logger, opts.Progress, opts.Now)
	for _, d := range []string{opts.DataDir, opts.RuntimeDir, opts.StateDir} {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d {
			return nil, fmt.Errorf("%w: %q is not a clean absolute path", ErrInvalid, d)
		}
	}
	if abs, err := filepath.Abs(opts.Archive); err == nil {
		opts.Archive = abs
	}
	if os.Geteuid() != 0 && opts.Owner.UID != os.Geteuid() {
		return nil, fmt.Errorf("%w: the data directory belongs to uid %d; restoring it for another user needs root", ErrInvalid, opts.Owner.UID)
	}
	r.opts = opts
	r.res = &RestoreResult{Archive: opts.Archive, Restored: map[string]string{}}
	return r, nil
}

// unlockInto releases lk, setting *err when it fails and nothing failed
// before.
func unlockInto(lk *lock.Lock, err *error) {
	if uerr := lk.Unlock(); uerr != nil && *err == nil {
		*err = fmt.Errorf("release lock: %w", uerr)
	}
}

// closeArchive closes the archive once opened.
func (r *restoreRun) closeArchive() {
	if r.ar != nil {
		r.ar.close()
	}
}

// openAndPlan opens the archive, maps its roots to directories, plans the
// pin, notes what the archive cannot tell or left out, and checks the free
// space.
func (r *restoreRun) openAndPlan() (err error) {
	if r.ar, err = openArchive(r.opts.Archive, r.opts.Passphrase); err != nil {
		return err
	}
	r.plan = PlanRestore(r.opts, r.ar.Manifest, r.ar.Encrypted)
	if err := r.plan.Err(); err != nil {
		return fmt.Errorf("%w (nothing changed)", err)
	}
	r.m = r.plan.manifest(r.ar.Manifest)
	switch {
	case r.plan.Authenticated:
	case r.plan.ChangesRuntime:
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("the archive is not authenticated (not encrypted with the box's passphrase): its runtime %s was accepted by name (--accept-image); every entry is owned by executor.user", r.plan.Image))
	default:
		r.res.Notes = append(r.res.Notes, "the archive is not authenticated (not encrypted with the box's passphrase): it could not change the runtime, and every entry is owned by executor.user")
	}
	if r.roots, err = restoreRoots(r.opts, r.m); err != nil {
		return err
	}
	r.roots[0].remapAll = !r.plan.Authenticated
	if err := refuseMountPoints(r.roots); err != nil {
		return err
	}
	if r.pinPlan, err = planPin(r.opts, r.m); err != nil {
		return err
	}
	m := r.m
	if m == nil {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("the archive has no %s: file contents, modes and completeness could not be checked, nor which runtime wrote it (the configured one is used)", ManifestName))
		return nil
	}
	if len(m.Skipped) > 0 {
		left := make([]string, len(m.Skipped))
		for i, f := range m.Skipped {
			left[i] = fmt.Sprintf("%q (%s)", f.Path, f.Type)
		}
		r.res.Notes = append(r.res.Notes, "the backup left out, so these are not restored: "+strings.Join(left, ", "))
		r.log.Warn("not in the archive", "entries", left)
	}
	_, bytes := m.Totals()
	target := r.roots[0].target
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return fmt.Errorf("create parent of %s: %w", target, err)
	}
	return checkSpace(filepath.Dir(target), bytes+int64(len(m.Files))*4096+16<<20, "the restored data")
}

// writeStagingJournal records the staging and pre-restore names of every
// root before anything is created.
func (r *restoreRun) writeStagingJournal() error {
	ts := datadir.Stamp(r.now())
	r.j = &journal{Phase: phaseStaging, Started: r.now().UTC(), PID: os.Getpid(), Archive: r.opts.Archive, Keep: r.opts.KeepPreRestore}
	// Over a restore "not started" (Recover left it): kept as Prior, put
	// back should this restore not take effect.
	prior, err := readJournal(r.opts.DataDir)
	if err != nil {
		return err
	}
	if prior != nil && prior.Phase == phaseNotStarted {
		prior.Prior = nil
		r.j.Prior = prior
	}
	for _, rt := range r.roots {
		kept := datadir.PreRestore
		if r.opts.KeepAs != "" {
			kept = r.opts.KeepAs
		}
		r.j.Roots = append(r.j.Roots, freshNames(rt.target, ts, kept))
	}
	return r.j.write(r.opts.DataDir)
}

// removeStagingOnFailure removes the staging trees and the journal when
// the restore fails before they are the journal's to undo (staged).
func (r *restoreRun) removeStagingOnFailure(err *error) {
	if *err != nil && !r.staged {
		for _, jr := range r.j.Roots {
			_ = datadir.RemoveTree(jr.Staging)
		}
		_ = endJournal(r.opts.DataDir, r.j)
	}
}

// stageArchive extracts and verifies the archive into the staging trees,
// makes them durable and records their identity and the targets'.
func (r *restoreRun) stageArchive(ctx context.Context) error {
	ar, j := r.ar, r.j
	if err := stage(ctx, ar, r.roots, j, r.opts, r.log); err != nil {
		return fmt.Errorf("%w (nothing changed)", ar.explain(err))
	}
	if _, _, err := ar.finish(); err != nil {
		return fmt.Errorf("%w (nothing changed)", ar.explain(err))
	}
	r.res.Files, r.res.Entries, r.res.Bytes = ar.Files, ar.Entries, ar.Bytes
	notes := append([]string(nil), ar.Notes...)
	for _, rt := range r.roots {
		if n := rt.dropped.note(); n != "" {
			notes = append(notes, rt.target+": "+n)
		}
	}
	for _, n := range notes {
		r.res.Notes = append(r.res.Notes, n)
		r.log.Warn(n)
	}
	if err := atomicfile.SyncFS(j.Roots[0].Staging); err != nil {
		return err
	}
	for i := range j.Roots {
		id, _, err := statID(j.Roots[i].Staging)
		if err != nil {
			return err
		}
		j.Roots[i].StagingID = id
		if id, ok, err := statID(j.Roots[i].Target); err != nil {
			return err
		} else if ok {
			j.Roots[i].TargetID, j.Roots[i].Existed = id, true
		}
	}
	r.prog.Event(Event{Kind: EventExtracted, Files: ar.Files, Bytes: ar.Bytes})
	r.log.Info("archive verified into staging", "archive", r.opts.Archive, "files", ar.Files, "bytes", ar.Bytes)
	return nil
}

// stopServices holds the programs (or, without a supervisor, checks that
// nothing holds files in the targets).
func (r *restoreRun) stopServices(ctx context.Context) error {
	hold, err := stopServices(ctx, r.opts.Services, targets(r.j), r.opts.HealthWait, r.log)
	if err != nil {
		return fmt.Errorf("%w (nothing changed)", err)
	}
	r.hold, r.released = hold, hold == nil
	r.prog.Event(Event{Kind: EventStopped})
	r.undoCtx = context.WithoutCancel(ctx)
	return nil
}

// release ends the hold, once.
func (r *restoreRun) release() error {
	if r.released {
		return nil
	}
	r.released = true
	return r.hold.Release()
}

// restartOnFailure, after a failure before the services were released,
// starts them again on the data as it is now, confirms they run, and says
// so in *err.
func (r *restoreRun) restartOnFailure(ctx context.Context, err *error) {
	if r.released {
		return
	}
	r.released = true
	rs := &restarter{hold: r.hold, svc: r.opts.Services, wait: r.opts.HealthWait, log: r.log, prog: nopProgress{}}
	switch rerr := rs.restart(ctx); {
	case *err == nil:
		*err = rerr
	case rerr != nil:
		*err = fmt.Errorf("%w; %w", *err, rerr)
	default:
		*err = fmt.Errorf("%w; services started again: %s", *err, list(rs.started))
	}
}

// activateRuntime makes the archive's runtime active (undoing an install
// that failed after it switched current), then refuses to swap when the
// supervisor went away meanwhile.
func (r *restoreRun) activateRuntime(ctx context.Context) error {
	opts, j := r.opts, r.j
	if err := ensureRuntime(ctx, opts, r.m, j, r.pinPlan, r.res); err != nil && r.mayGoWithout(err) {
		r.goWithout(err)
	} else if err != nil {
		if errors.Is(err, ErrRuntimeUnavailable) && !opts.WithoutRuntime {
			err = fmt.Errorf("%w; to restore the data anyway with the programs left stopped until that runtime is installed, run %s", err, opts.rerun(withoutRuntimeFlags(opts)...))
		}
		if _, _, uerr := undo(r.undoCtx, j, opts.Runtime, opts.Config, r.log); uerr != nil {
			r.staged = true // keep the journal: the next hbx start retries the undo
			return fmt.Errorf("%w; putting the runtime before back failed, the next hbx start retries it: %w", err, uerr)
		}
		return fmt.Errorf("restore undone, nothing changed: %w", err)
	}
	if !r.without {
		r.prog.Event(Event{Kind: EventRuntime})
	}
	if supervisorGone(opts.Services) {
		// Its programs died with it; nothing may be swapped in under no one.
		if _, _, uerr := undo(r.undoCtx, j, opts.Runtime, opts.Config, r.log); uerr != nil {
			r.staged = true // keep the journal: the next hbx start retries the undo
			return fmt.Errorf("%w while the programs were stopped, before the swap: the data is unchanged, but putting the runtime before back failed, the next hbx start retries it: %w", ErrSupervisorGone, uerr)
		}
		return fmt.Errorf("%w while the programs were stopped, before the swap: restore stopped, nothing changed", ErrSupervisorGone)
	}
	return nil
}

// undoNow undoes the restore through the journal after cause, from the
// swap on.
func (r *restoreRun) undoNow(cause error) error {
	if _, _, uerr := undo(r.undoCtx, r.j, r.opts.Runtime, r.opts.Config, r.log); uerr != nil {
		return fmt.Errorf("%w; undo failed, the next hbx start retries it: %w", cause, uerr)
	}
	_ = endJournal(r.opts.DataDir, r.j)
	return fmt.Errorf("%w (restore undone)", cause)
}

// swapIn records the swap in the journal, then exchanges every staging
// tree with its target; from here on, failures undo through the journal.
func (r *restoreRun) swapIn() error {
	r.j.Phase = phaseSwapping
	if err := r.j.write(r.opts.DataDir); err != nil {
		return err
	}
	r.staged = true
	if err := swap(r.j, r.log); err != nil {
		return r.undoNow(fmt.Errorf("swap: %w", err))
	}
	for _, jr := range r.j.Roots {
		old := ""
		if jr.Existed {
			old = jr.Old
		}
		r.res.Restored[jr.Target] = old
	}
	r.prog.Event(Event{Kind: EventSwapped})
	return nil
}

// pin writes the archive's release into the config file, last: until
// here the config still names the release before, so a supervisor
// restarting Executor after a crash refuses the mismatch instead of
// running one release on another's data.
func (r *restoreRun) pin() error {
	j := r.j
	if j.Runtime == nil || j.Runtime.Pin == nil {
		return nil
	}
	killpoint.At(killpoint.BeforePin)
	man := activeManifest(r.opts.RuntimeDir)
	if r.without {
		// The archive's child manifest, when it is the configured platform's.
		man = ""
		if r.opts.Platform == "" || r.m.Platform == r.opts.Platform {
			man = r.m.ManifestDigest
		}
	}
	if err := r.opts.Config.Pin(j.Runtime.Pin.Image, man); err != nil {
		return r.undoNow(fmt.Errorf("pin %s in the config file: %w", j.Runtime.Pin.Image, err))
	}
	killpoint.At(killpoint.AfterPin)
	r.res.Pinned, r.res.PinnedOver = j.Runtime.Pin.Image, j.Runtime.Pin.PriorImage
	r.prog.Event(Event{Kind: EventPinned, Detail: j.Runtime.Pin.Image})
	return nil
}

// startAndCheck releases the hold and waits for the services to be
// healthy on the restored data, undoing the restore when they are not.
// From the swap on, the restore ends committed or undone here: an
// interrupt does not cut the health wait or the undo short (both are
// bounded), or the journal would be left for a later command to undo data
// the programs have been writing since.
func (r *restoreRun) startAndCheck(ctx context.Context) error {
	opts := r.opts
	if opts.Services == nil {
		r.res.Notes = append(r.res.Notes, "no supervisor runs: nothing was started and health was not checked")
		return nil
	}
	if err := r.release(); err != nil {
		return fmt.Errorf("start services: %w", err)
	}
	r.prog.Event(Event{Kind: EventStarted})
	hctx, cancel := context.WithTimeout(r.undoCtx, opts.HealthWait)
	hctx, stop := untilGone(hctx, opts.Services)
	herr := opts.Services.WaitHealthy(hctx)
	stop()
	cancel()
	if herr != nil {
		return undoUnhealthy(r.undoCtx, opts, r.j, herr, r.log, r.prog)
	}
	r.res.Healthy = true
	r.prog.Event(Event{Kind: EventHealthy})
	if ctx.Err() != nil {
		r.res.Notes = append(r.res.Notes, "interrupted after the data was swapped: the restore was finished, not cut short")
	}
	return nil
}

// commit records the restore as confirmed, prunes old pre-restore copies
// and removes the journal.
func (r *restoreRun) commit() error {
	r.j.Phase, r.j.Prior = phaseCommitted, nil // confirmed: a prior restore not started is superseded
	if err := r.j.write(r.opts.DataDir); err != nil {
		return err
	}
	for _, jr := range r.j.Roots {
		var own []string
		if r.opts.KeepPreRestore > 0 {
			own = append(own, jr.Old) // this restore's, whatever the clock says
		}
		pruned, perr := datadir.Prune(jr.Target, datadir.PreRestore, r.opts.KeepPreRestore, own...)
		r.res.Pruned = append(r.res.Pruned, pruned...)
		if perr != nil {
			r.log.Warn("prune pre-restore copies", "err", perr)
		}
		if jr.Existed && slices.Contains(pruned, jr.Old) {
			r.res.Restored[jr.Target] = ""
		}
	}
	if err := removeJournal(r.opts.DataDir); err != nil {
		return err
	}
	r.prog.Event(Event{Kind: EventCommitted})
	return nil
}

// withoutRuntimeFlags are the flags that run the restore of opts again
// with --without-runtime: the image it accepted, if any, too.
func withoutRuntimeFlags(opts RestoreOptions) []string {
	if opts.AcceptImage != "" {
		return []string{"--accept-image", opts.AcceptImage, "--without-runtime"}
	}
	return []string{"--without-runtime"}
}
