package upgrade

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hermesbox/hbx/internal/keptcopy"
	"github.com/hermesbox/hbx/release"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/internal/lock"
)

// LockFile is the runtime directory's lock, the one install, backup and
// restore take.
const LockFile = release.LockFile

var (
	// ErrSameRelease: the target is already the active release.
	ErrSameRelease = errors.New("already the active release")
	// ErrNoSupervisor: no supervisor runs, so nothing could be stopped or
	// health-checked.
	ErrNoSupervisor = errors.New("no supervisor is running (start hbx supervise first)")
	// ErrRolledBack: the upgrade failed after activation and was rolled
	// back; the error also wraps the cause.
	ErrRolledBack = errors.New("upgrade rolled back")
	// ErrNoUpgrade: there is no completed upgrade to roll back.
	ErrNoUpgrade = errors.New("no upgrade to roll back")
	// ErrMismatch: the pre-upgrade archive or the releases on disk do not
	// match the journal.
	ErrMismatch = errors.New("does not match the recorded upgrade")
	// ErrInvalid: bad options.
	ErrInvalid = errors.New("invalid upgrade options")
	// ErrSupervisorGone: the connection to the supervisor broke during the
	// change (Watcher): it died, and its programs with it, or shut down.
	ErrSupervisorGone = errors.New("the supervisor is gone (its connection broke)")
)

// Runtime is the installer: releases in the runtime directory.
type Runtime interface {
	// Active and Previous read the releases current and previous name.
	Active() (Release, error)
	Previous() (Release, error)
	// Stage publishes the release of image (pinned to manifest pin when
	// not "") without activating it. ctx carries the held lock.
	Stage(ctx context.Context, image string, pin digest.Digest) (Release, error)
	// Activate makes the published release of manifest the active one
	// (previous := the old current). ctx carries the held lock.
	Activate(ctx context.Context, manifest digest.Digest) error
}

// Hold keeps the services stopped until Release.
type Hold interface{ Release() error }

// Services is the supervisor with the health checks.
type Services interface {
	// Hold stops every program and keeps them stopped until Release or
	// until this process dies.
	Hold(ctx context.Context) (Hold, error)
	// WaitHealthy starts the programs that should run and returns nil
	// once they run and the health checks pass for r, or an error saying
	// which fail when ctx ends first.
	WaitHealthy(ctx context.Context, r Release) error
}

// Watcher is implemented by Services that notice at once when the
// supervisor goes away: Gone is closed when a connection to it (the hold,
// or a watch kept open for the whole change) breaks without being
// released. Upgrade and Switch then stop waiting: before activation the
// change is abandoned (the old release stays active and configured);
// during the health wait it is rolled back at once, without a supervisor.
// The error wraps ErrSupervisorGone.
type Watcher interface {
	Gone() <-chan struct{}
}

// goneCh is svc's Gone channel, or nil (never ready) when it has none.
func goneCh(svc Services) <-chan struct{} {
	if w, ok := svc.(Watcher); ok {
		return w.Gone()
	}
	return nil
}

// isGone reports whether svc's supervisor is gone.
func isGone(svc Services) bool {
	select {
	case <-goneCh(svc):
		return true
	default:
		return false
	}
}

// untilGone returns ctx cancelled with ErrSupervisorGone as its cause once
// svc's supervisor is gone.
func untilGone(ctx context.Context, svc Services) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithCancelCause(ctx)
	if gone := goneCh(svc); gone != nil {
		go func() {
			select {
			case <-gone:
				cancel(ErrSupervisorGone)
			case <-cctx.Done():
			}
		}()
	}
	return cctx, func() { cancel(nil) }
}

// Data is backup and restore of the data directory.
type Data interface {
	// Backup writes a cold archive of the data, recording r as its
	// runtime, while the services are already held; it returns the
	// archive's path.
	Backup(ctx context.Context, r Release) (string, error)
	// Check says whether archive exists and records r's digests.
	Check(archive string, r Release) error
	// Restore replaces the data with archive's and makes r the active
	// release (stopping the services, unless none run, then starting them
	// and waiting for health). It returns where the replaced data is kept
	// ("" when there was none).
	Restore(ctx context.Context, archive string, r Release) (string, error)
}

// Config pins a release in the config file hbx was started with.
type Config interface {
	// Pin writes r's image and manifest digest, and its tool set unless
	// r.MCPTools is nil, in one write; it returns a note when nothing
	// could be written (no config file), "" otherwise.
	Pin(r Release) (string, error)
}

// Options are the parts an upgrade or rollback works with.
type Options struct {
	RuntimeDir string // absolute; holds the lock and the journal
	DataDir    string // absolute; where rolled-back data is kept aside beside
	// KeepRolledBack is how many <DataDir>.rolled-back-<time> copies a
	// rollback leaves, its own included, newest first
	// (backup.keep_pre_restore); at least 1: the newest copy holds data no
	// archive holds, and is never removed.
	KeepRolledBack int
	LockWait       time.Duration
	HealthWait     time.Duration // bound on the wait for health after a switch

	Runtime  Runtime
	Services Services // nil: no supervisor runs (Recover only)
	Data     Data
	Config   Config

	Logger *slog.Logger
	// Step, if not nil, is told each step as it starts ("staging",
	// "stopping", "backing-up", "activating", "health", "done",
	// "rolling-back", "rolled-back"); "activating" and "rolling-back"
	// come once their journal phase is durable.
	Step func(step string)
	Now  func() time.Time
}

// Target is the release to upgrade to.
type Target struct {
	Image string        // name:tag@sha256:..., validated by the caller
	Index digest.Digest // the reference's digest
	Pin   digest.Digest // the platform's manifest digest, "" when not pinned
	// MCPTools is the tool set to pin with the new release; nil keeps
	// Current's.
	MCPTools *Tools
	// Current is the tool set the config file pins now, recorded with the
	// old release so a rollback puts it back; nil when not known (the
	// config file's tool set is then left as it is).
	Current *Tools
}

// Result says what an upgrade or rollback did.
type Result struct {
	Old, New  Release // for a rollback: Old is what was active, New what is now
	Backup    string  // the pre-upgrade archive
	KeptAside string  // rollback: where the replaced data is
	Notes     []string
	Recovered string // an interrupted upgrade handled first
	// Interrupted (Rollback only): the change to roll back was an
	// interrupted one, which the recovery (Recovered) already undid;
	// nothing more was rolled back.
	Interrupted bool
	Duration    time.Duration
}

func (o *Options) defaults() error {
	if !filepath.IsAbs(o.RuntimeDir) || !filepath.IsAbs(o.DataDir) {
		return fmt.Errorf("%w: runtime and data directories must be absolute", ErrInvalid)
	}
	if o.Runtime == nil || o.Data == nil || o.Config == nil {
		return fmt.Errorf("%w: runtime, data and config are required", ErrInvalid)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Step == nil {
		o.Step = func(string) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HealthWait <= 0 {
		o.HealthWait = 2 * time.Minute
	}
	return nil
}

func (o *Options) lock(ctx context.Context, command string) (context.Context, *lock.Lock, error) {
	lk, err := release.LockRuntime(ctx, o.RuntimeDir, command, o.LockWait, o.Logger)
	if err != nil {
		return nil, nil, err
	}
	return lock.WithHeld(ctx, lk), lk, nil
}

// Upgrade moves the box to t; see the package doc for the steps.
func Upgrade(ctx context.Context, opts Options, t Target) (res *Result, err error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if opts.Services == nil {
		return nil, ErrNoSupervisor
	}
	return change(ctx, opts, t, "", true)
}

// Switch changes the active release to t while Executor does not run
// (the caller made sure: `hbx install` under existing data): the steps
// of Upgrade, recorded in the journal the same way (by "hbx install"),
// so Rollback can undo it, but without the health wait, since nothing
// ran. Services may be nil (no supervisor); when set, every program is
// held stopped across the backup and the activation.
func Switch(ctx context.Context, opts Options, t Target) (*Result, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	return change(ctx, opts, t, ByInstall, false)
}

// ByInstall is Journal.By for a release change made by `hbx install`.
const ByInstall = "hbx install"

func change(ctx context.Context, opts Options, t Target, by string, wait bool) (res *Result, err error) {
	start := time.Now()
	command := "hbx upgrade"
	if by != "" {
		command = by
	}
	ctx, lk, err := opts.lock(ctx, command)
	if err != nil {
		return nil, err
	}
	defer func() {
		if uerr := lk.Unlock(); uerr != nil && err == nil {
			err = fmt.Errorf("release lock: %w", uerr)
		}
	}()
	res = &Result{}
	if res.Recovered, err = recoverLocked(ctx, opts); err != nil {
		return nil, fmt.Errorf("recover an interrupted upgrade: %w", err)
	}
	// Putting things back after a failure must finish even when ctx was
	// cancelled (Ctrl-C, SIGTERM): the undo steps keep ctx's values (the
	// lock), not its cancellation; their waits are bounded by HealthWait.
	undoCtx := context.WithoutCancel(ctx)
	old, err := opts.Runtime.Active()
	if err != nil {
		return nil, fmt.Errorf("read the active release: %w", err)
	}
	res.Old = old
	if old.Index == t.Index && (t.Pin == "" || old.Manifest == t.Pin) {
		return nil, fmt.Errorf("%w: %s", ErrSameRelease, old)
	}

	opts.Step("staging")
	opts.Logger.Info("staging the new release beside the active one", "image", t.Image)
	nr, err := opts.Runtime.Stage(ctx, t.Image, t.Pin)
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", t.Image, err)
	}
	if nr.Same(old) {
		return nil, fmt.Errorf("%w: %s", ErrSameRelease, old)
	}
	old.MCPTools, nr.MCPTools = t.Current, t.Current
	if t.MCPTools != nil {
		nr.MCPTools = t.MCPTools
	}
	res.Old, res.New = old, nr
	j := &Journal{Old: old, New: nr, Started: opts.Now().UTC(), By: by}
	if prior, err := ReadJournal(opts.RuntimeDir); err == nil && prior != nil && prior.Phase == PhaseDone && prior.New.Same(old) {
		prior.Prior = nil
		j.Prior = prior
	}
	if err := j.write(opts.RuntimeDir, PhaseStaged, opts.Now()); err != nil {
		return nil, err
	}
	abort := func(cause error) error {
		if werr := j.close(opts.RuntimeDir, cause.Error(), opts.Now()); werr != nil {
			opts.Logger.Warn("close the upgrade journal", "err", werr)
		}
		return cause
	}

	var hold Hold = noHold{}
	if opts.Services != nil {
		opts.Step("stopping")
		if hold, err = opts.Services.Hold(ctx); err != nil {
			return nil, abort(fmt.Errorf("stop the services: %w", err))
		}
	}
	held := true
	defer func() {
		if held {
			if rerr := hold.Release(); rerr != nil {
				opts.Logger.Warn("release the hold", "err", rerr)
			}
		}
	}()
	// resume ends the hold after a failure before activation and waits
	// until the services are healthy again on the old release; the error
	// says whether they are, and which were started again.
	resume := func(cause error) error {
		held = false
		names, none := "the services", false
		if r, ok := hold.(interface{ Running() []string }); ok {
			names, none = "none were running", len(r.Running()) == 0
			if !none {
				names = strings.Join(r.Running(), ", ")
			}
		}
		if rerr := hold.Release(); rerr != nil {
			return fmt.Errorf("%w; start the services again (%s): %w", cause, names, rerr)
		}
		if opts.Services == nil {
			return fmt.Errorf("%w (no supervisor runs: nothing to start again)", cause)
		}
		if none {
			// Nothing was running (hbx install over a stopped Executor):
			// nothing to wait for, nothing is unhealthy.
			return fmt.Errorf("%w; nothing was running, nothing started again", cause)
		}
		// An interrupted change still learns whether the services run
		// again: the wait is bounded, not cancelled with ctx.
		hctx, cancel := context.WithTimeout(undoCtx, opts.HealthWait)
		werr := opts.Services.WaitHealthy(hctx, old)
		cancel()
		if werr != nil {
			return fmt.Errorf("%w; services started again: %s, but not healthy on %s: %w", cause, names, old, werr)
		}
		return fmt.Errorf("%w; services started again: %s (healthy on %s)", cause, names, old)
	}
	// gone abandons the change when the supervisor went away while it held
	// the services: they died with it, nothing is waited for.
	gone := func() error {
		held = false
		kept := ""
		if j.Backup != "" {
			kept = fmt.Sprintf(" (the pre-upgrade backup %s is kept)", j.Backup)
		}
		return abort(fmt.Errorf("%w while the services were held for the pre-upgrade backup: upgrade stopped before activation, %s stays active and configured%s; nothing runs: start hbx supervise", ErrSupervisorGone, old.Image, kept))
	}
	opts.Step("backing-up")
	bctx, stopBackup := untilGone(ctx, opts.Services)
	j.Backup, err = opts.Data.Backup(bctx, old)
	stopBackup()
	if isGone(opts.Services) {
		return nil, gone()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, abort(resume(fmt.Errorf("pre-upgrade backup interrupted (%v; no archive kept): nothing was activated, %s stays active", context.Cause(ctx), old)))
		}
		return nil, abort(resume(fmt.Errorf("pre-upgrade backup: %w", err)))
	}
	res.Backup = j.Backup
	if err := j.write(opts.RuntimeDir, PhaseBackedUp, opts.Now()); err != nil {
		return nil, abort(resume(err))
	}

	if isGone(opts.Services) {
		return nil, gone()
	}
	if err := j.write(opts.RuntimeDir, PhaseActivating, opts.Now()); err != nil {
		return nil, abort(resume(err))
	}
	opts.Step("activating")
	// From activation on, the change ends done or rolled back here: an
	// interrupt does not cut the activation, the health wait or the
	// rollback short (each is bounded), or the journal would be left for
	// a later command to roll back data the new runtime has been writing
	// (undoCtx).
	fail := func(cause error) error {
		opts.Logger.Error("upgrade failed after activation; rolling back", "err", cause)
		if held {
			held = false
			if rerr := hold.Release(); rerr != nil {
				opts.Logger.Warn("release the hold", "err", rerr)
			}
		}
		rb, rerr := rollbackLocked(undoCtx, opts, j, cause.Error())
		if rerr != nil {
			return fmt.Errorf("%w; rollback failed too, the next hbx start retries it: %w", cause, rerr)
		}
		res.KeptAside, res.Notes = rb.KeptAside, append(res.Notes, rb.Notes...)
		if isGone(opts.Services) {
			return fmt.Errorf("%w to %s: %w; the data written by the new runtime is kept in %s; nothing runs: start hbx supervise", ErrRolledBack, old, cause, orNone(rb.KeptAside))
		}
		return fmt.Errorf("%w to %s: %w; the data written by the new runtime is kept in %s", ErrRolledBack, old, cause, orNone(rb.KeptAside))
	}
	note, err := opts.Config.Pin(nr)
	if err != nil {
		return nil, fail(fmt.Errorf("pin the new release in the config: %w", err))
	}
	if note != "" {
		res.Notes = append(res.Notes, note)
	}
	if err := opts.Runtime.Activate(undoCtx, nr.Manifest); err != nil {
		return nil, fail(fmt.Errorf("activate: %w", err))
	}
	held = false
	if err := hold.Release(); err != nil {
		return nil, fail(fmt.Errorf("start the services: %w", err))
	}
	if wait {
		opts.Step("health")
		killpoint.At(killpoint.UpgradeHealthWait)
		hctx, cancel := context.WithTimeout(undoCtx, opts.HealthWait)
		hctx, stop := untilGone(hctx, opts.Services)
		err = opts.Services.WaitHealthy(hctx, nr)
		stop()
		cancel()
		if err != nil && isGone(opts.Services) {
			return nil, fail(fmt.Errorf("%w during the health wait on %s", ErrSupervisorGone, nr.Image))
		}
		if err != nil {
			return nil, fail(fmt.Errorf("health on %s: %w", nr.Image, err))
		}
	}
	if ctx.Err() != nil {
		res.Notes = append(res.Notes, "interrupted after activation: the change was finished, not cut short")
	}
	if err := j.write(opts.RuntimeDir, PhaseDone, opts.Now()); err != nil {
		return nil, err
	}
	opts.Step("done")
	res.Duration = time.Since(start)
	return res, nil
}

// noHold is the Hold of a Switch without a supervisor: nothing to release.
type noHold struct{}

func (noHold) Release() error { return nil }

// Rollback reactivates the release previous names and restores the
// pre-upgrade archive made for it; see the package doc.
func Rollback(ctx context.Context, opts Options) (res *Result, err error) {
	start := time.Now()
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	ctx, lk, err := opts.lock(ctx, "hbx rollback")
	if err != nil {
		return nil, err
	}
	defer func() {
		if uerr := lk.Unlock(); uerr != nil && err == nil {
			err = fmt.Errorf("release lock: %w", uerr)
		}
	}()
	recovered, err := recoverLocked(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("recover an interrupted upgrade: %w", err)
	}
	j, err := ReadJournal(opts.RuntimeDir)
	if err != nil {
		return nil, err
	}
	cur, curErr := opts.Runtime.Active()
	active := "no release is active"
	if curErr == nil {
		active = "the active release is " + cur.Image
	}
	// A change interrupted before this command was undone by the recovery
	// just now: that was the rollback asked for.
	if recovered != "" && j != nil && curErr == nil && (j.Phase == PhaseRolledBack || j.Phase == PhaseAborted) && cur.Same(j.Old) {
		return &Result{Old: j.New, New: j.Old, Backup: j.Backup, KeptAside: j.KeptAside, Recovered: recovered, Interrupted: true, Duration: time.Since(start)}, nil
	}
	// What the journal leaves active: the new release after a completed
	// change, the old one after a rollback or an abort.
	expected := j != nil && curErr == nil && (j.Phase == PhaseDone && cur.Same(j.New) || j.Phase != PhaseDone && cur.Same(j.Old))
	switch {
	case j == nil:
		return nil, fmt.Errorf("%w: none was recorded in %s (%s)", ErrNoUpgrade, opts.RuntimeDir, active)
	case !expected:
		// The release changed after the recorded change, without a
		// record (an older hbx install, or by hand): say so, not what
		// the journal says about another release.
		if curErr == nil {
			active = "the active release " + cur.Image
		}
		return nil, fmt.Errorf("%w: %s was installed without a record; the last recorded %s", ErrNoUpgrade, active, j.describe())
	case j.Phase != PhaseDone && j.Recovered:
		// Undone by a recovery (the running supervisor, a restart) before
		// this command: say what it did, and where the data went.
		return nil, fmt.Errorf("%w: %s; the last recorded %s, undone by the recovery of the interrupted change; the data written meanwhile is kept in %s", ErrNoUpgrade, active, j.describe(), orNone(j.KeptAside))
	case j.Phase != PhaseDone:
		return nil, fmt.Errorf("%w: %s; the last recorded %s", ErrNoUpgrade, active, j.describe())
	}
	prev, err := opts.Runtime.Previous()
	if err != nil {
		return nil, fmt.Errorf("%w: previous: %w", ErrNoUpgrade, err)
	}
	if !prev.Same(j.Old) {
		return nil, fmt.Errorf("%w: previous is %s, the pre-upgrade backup was made for %s", ErrMismatch, prev, j.Old)
	}
	if err := opts.Data.Check(j.Backup, j.Old); err != nil {
		return nil, fmt.Errorf("%w: pre-upgrade backup %s: %w", ErrMismatch, j.Backup, err)
	}
	res, err = rollbackLocked(ctx, opts, j, "hbx rollback")
	if err != nil {
		return nil, err
	}
	res.Recovered, res.Duration = recovered, time.Since(start)
	return res, nil
}

// rollbackLocked puts j.Old and the pre-upgrade data back, under the lock.
func rollbackLocked(ctx context.Context, opts Options, j *Journal, why string) (*Result, error) {
	j.Error = why
	if err := j.write(opts.RuntimeDir, PhaseRollingBack, opts.Now()); err != nil {
		return nil, err
	}
	opts.Step("rolling-back")
	res := &Result{Old: j.New, New: j.Old, Backup: j.Backup}
	note, err := opts.Config.Pin(j.Old)
	if err != nil {
		return nil, fmt.Errorf("pin the old release in the config: %w", err)
	}
	if note != "" {
		res.Notes = append(res.Notes, note)
	}
	aside, err := opts.Data.Restore(ctx, j.Backup, j.Old)
	if err != nil {
		return nil, fmt.Errorf("restore the pre-upgrade backup %s: %w", j.Backup, err)
	}
	if aside != "" {
		kept := fmt.Sprintf("%s%s%s", opts.DataDir, rolledBackInfix, opts.Now().UTC().Format("20060102T150405Z"))
		if err := os.Rename(aside, kept); err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("the replaced data stays in %s: %v", aside, err))
			kept = aside
		} else if err := atomicfile.SyncDir(filepath.Dir(kept)); err != nil {
			return nil, err
		} else {
			// The restore logged aside as its pre-restore copy: say
			// where that copy is now.
			opts.Logger.Info("replaced data kept as a rolled-back copy", "from", aside, "to", kept)
		}
		res.KeptAside = kept
		pruned, err := keptcopy.Prune(opts.DataDir, rolledBackInfix, max(opts.KeepRolledBack, 1))
		for _, p := range pruned {
			res.Notes = append(res.Notes, fmt.Sprintf("removed the older rolled-back copy %s (backup.keep_pre_restore)", p))
		}
		if err != nil {
			opts.Logger.Warn("prune rolled-back copies", "err", err)
		}
	}
	j.KeptAside = res.KeptAside
	if err := j.write(opts.RuntimeDir, PhaseRolledBack, opts.Now()); err != nil {
		return nil, err
	}
	opts.Step("rolled-back")
	return res, nil
}

// rolledBackInfix names the copies a rollback keeps: <data_dir>.rolled-back-<UTC time>.
const rolledBackInfix = ".rolled-back-"

// Recover finishes or undoes an upgrade or rollback that was interrupted;
// see the package doc. It returns what it did, "" when nothing. While
// another process holds the lock, it does nothing.
func Recover(ctx context.Context, opts Options) (string, error) {
	j, err := ReadJournal(opts.RuntimeDir)
	if err != nil || j == nil || !pending(j.Phase) {
		return "", err
	}
	if err := opts.defaults(); err != nil {
		return "", err
	}
	ctx, lk, err := opts.lock(ctx, "hbx recover")
	if lock.IsLocked(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer lk.Unlock()
	return recoverLocked(ctx, opts)
}

func pending(p Phase) bool {
	switch p {
	case PhaseStaged, PhaseBackedUp, PhaseActivating, PhaseRollingBack:
		return true
	}
	return false
}

func recoverLocked(ctx context.Context, opts Options) (string, error) {
	j, err := ReadJournal(opts.RuntimeDir)
	if err != nil || j == nil || !pending(j.Phase) {
		return "", err
	}
	switch j.Phase {
	case PhaseStaged, PhaseBackedUp:
		if err := j.close(opts.RuntimeDir, "interrupted before activation", opts.Now()); err != nil {
			return "", err
		}
		return fmt.Sprintf("closed the upgrade to %s, interrupted before activation: %s stays active", j.New.Image, j.Old.Image), nil
	}
	if j.Backup == "" {
		return "", fmt.Errorf("%w: journal phase %s without a backup", ErrMismatch, j.Phase)
	}
	j.Recovered = true
	res, err := rollbackLocked(ctx, opts, j, "interrupted during "+string(j.Phase))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("rolled back the interrupted upgrade to %s: %s is active on the pre-upgrade data; the other data is in %s", j.New.Image, j.Old.Image, orNone(res.KeptAside)), nil
}

func orNone(s string) string {
	if s == "" {
		return "(nothing was replaced)"
	}
	return s
}
