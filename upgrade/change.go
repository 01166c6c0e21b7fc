package upgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/release"
)

// ByInstall is Journal.By for a release change made by `hbx install`.
const ByInstall = "hbx install"

// changeRun is one Upgrade or Switch under the lock: the steps of the
// package doc, each a method, sharing the journal and the hold.
type changeRun struct {
	opts    Options
	t       Target
	res     *Result
	j       *Journal
	old, nr Release
	hold    Hold
	held    bool // hold is not released yet
	// ran: the services were started on the new release (its logs say
	// why it failed)
	ran bool
	// undoCtx keeps ctx's values (the lock), not its cancellation: putting
	// things back after a failure, and everything from activation on,
	// finishes even after Ctrl-C; their waits are bounded by HealthWait.
	undoCtx context.Context
}

// change runs the steps of an Upgrade (wait: the health wait) or a Switch
// (by ByInstall) under the runtime directory's lock.
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
	c := &changeRun{opts: opts, t: t, res: &Result{}, hold: noHold{}, undoCtx: context.WithoutCancel(ctx)}
	if err := c.readActive(ctx); err != nil {
		return nil, err
	}
	if err := c.stage(ctx); err != nil {
		return nil, err
	}
	if err := c.rehearse(ctx, wait); err != nil {
		return nil, err
	}
	if err := c.begin(by); err != nil {
		return nil, err
	}
	if err := c.stop(ctx); err != nil {
		return nil, err
	}
	defer c.releaseHold()
	if err := c.backup(ctx); err != nil {
		return nil, err
	}
	if err := c.activate(); err != nil {
		return nil, err
	}
	if wait {
		if err := c.waitHealthy(); err != nil {
			return nil, err
		}
	}
	if err := c.finish(ctx); err != nil {
		return nil, err
	}
	c.res.Duration = time.Since(start)
	return c.res, nil
}

// readActive finishes or undoes an interrupted change first (Recover),
// then reads the active release and refuses t when it is that one. Crash
// window: none of its own (only the recovery writes, see Recover).
func (c *changeRun) readActive(ctx context.Context) (err error) {
	if c.res.Recovered, err = recoverLocked(ctx, c.opts); err != nil {
		return fmt.Errorf("recover an interrupted upgrade: %w", err)
	}
	if c.old, err = c.opts.Runtime.Active(); err != nil {
		return fmt.Errorf("read the active release: %w", err)
	}
	c.res.Old = c.old
	if c.old.IndexDigest == c.t.IndexDigest && (c.t.ManifestDigest == "" || c.old.ManifestDigest == c.t.ManifestDigest) {
		return fmt.Errorf("%w: %s", ErrSameRelease, c.old)
	}
	return nil
}

// stage publishes the new release beside the active one. Crash window
// "no journal yet": a partial release or staging, never current; nothing
// to recover.
func (c *changeRun) stage(ctx context.Context) (err error) {
	c.opts.Step("staging")
	c.opts.Logger.Info("staging the release beside the active one", "image", c.t.Image)
	if c.nr, c.res.Transfer, err = c.opts.Runtime.Stage(ctx, c.t.Image, c.t.ManifestDigest); err != nil {
		return fmt.Errorf("stage %s: %w", c.t.Image, err)
	}
	if c.nr.Equal(c.old.Target) {
		return fmt.Errorf("%w: %s", ErrSameRelease, c.old)
	}
	c.old.MCPTools, c.nr.MCPTools = c.t.Current, c.t.Current
	if c.t.MCPTools != nil {
		c.nr.MCPTools = c.t.MCPTools
	}
	c.res.Old, c.res.New = c.old, c.nr
	return nil
}

// begin writes the journal (phase staged) before anything is stopped,
// with the release previous names now (Journal.Previous): none when
// previous is missing, dangling or not hbx's link to a release
// (release.ErrNoRelease, release.ErrCorrupt); not recorded when it does
// not read (a directory there, an I/O error), so a rollback leaves it
// as the restore left it rather than remove what hbx did not make.
func (c *changeRun) begin(by string) error {
	c.j = &Journal{Old: c.old, New: c.nr, Started: c.opts.Now().UTC(), By: by, Previous: &PreviousRecord{}}
	prev, err := c.opts.Runtime.Previous()
	switch {
	case err == nil && prev.IndexDigest != "":
		c.j.Previous.Release = &prev
	case errors.Is(err, release.ErrNoRelease), errors.Is(err, release.ErrCorrupt):
		c.opts.Logger.Info("nothing to keep across the change", "reason", err)
	case err != nil:
		c.opts.Logger.Warn("previous does not read: a rollback leaves it as the restore does", "err", err)
		c.j.Previous = nil
	}
	// The last completed change stays recorded across changes that
	// ended without completing after it (rolled back by themselves or by
	// a recovery, aborted: lastCompleted), so hbx rollback still undoes
	// it.
	if prior, err := ReadJournal(c.opts.RuntimeDir); err == nil && prior != nil {
		if last := prior.lastCompleted(); last != nil {
			prior = last
		}
		if prior.Phase == PhaseDone && prior.New.Equal(c.old.Target) {
			prior.Prior, prior.ClosedNext = nil, ""
			c.j.Prior = prior
		}
	}
	return c.j.write(c.opts.RuntimeDir, PhaseStaged, c.opts.Now())
}

// rehearse boots the staged release on a copy of the data (an Upgrade
// or a Switch with opts.Rehearse set; an Upgrade without notes
// NotRehearsed) before anything is stopped or journaled. Crash
// window "no journal yet": the rehearsal's scratch copy (and a process
// that outlived hbx) are the next rehearsal's to remove; nothing to
// recover.
func (c *changeRun) rehearse(ctx context.Context, upgrading bool) error {
	if c.opts.Rehearse == nil {
		if upgrading {
			c.res.Notes = append(c.res.Notes, NotRehearsed)
		}
		return nil
	}
	c.opts.Step("rehearsing")
	note, err := c.opts.Rehearse(ctx, c.nr)
	if err != nil {
		return fmt.Errorf("rehearse %s (nothing was stopped, %s stays active): %w", c.nr.Image, c.old.Image, err)
	}
	if note != "" {
		c.res.Notes = append(c.res.Notes, note)
	}
	return nil
}

// abort closes the journal as aborted (putting back a prior completed
// one) and returns cause.
func (c *changeRun) abort(cause error) error {
	if werr := c.j.close(c.opts.RuntimeDir, cause.Error(), c.opts.Now()); werr != nil {
		c.opts.Logger.Warn("close the upgrade journal", "err", werr)
	}
	return cause
}

// stop holds every program stopped (when a supervisor runs). Crash window
// "staged": the hold dies with the process; Recover closes the journal.
func (c *changeRun) stop(ctx context.Context) (err error) {
	if c.opts.Services != nil {
		c.opts.Step("stopping")
		if c.hold, err = c.opts.Services.Hold(ctx); err != nil {
			return c.abort(fmt.Errorf("stop the services: %w", err))
		}
	}
	c.held = true
	return nil
}

// releaseHold ends the hold unless a step already did.
func (c *changeRun) releaseHold() {
	if c.held {
		c.held = false
		if rerr := c.hold.Release(); rerr != nil {
			c.opts.Logger.Warn("release the hold", "err", rerr)
		}
	}
}

// backup takes the cold pre-upgrade backup while the hold keeps the data
// still (phase backed-up). Crash window "staged, backed-up": current and
// the config name the old release, the data was only read; Recover
// closes the journal as aborted. A failure ends the hold (resume); a
// supervisor gone abandons the change (gone).
func (c *changeRun) backup(ctx context.Context) (err error) {
	c.opts.Step("backing-up")
	bctx, stopBackup := untilGone(ctx, c.opts.Services)
	c.j.Backup, err = c.opts.Data.Backup(bctx, c.old, c.spare())
	stopBackup()
	if isGone(c.opts.Services) {
		return c.gone()
	}
	if err != nil {
		if ctx.Err() != nil {
			return c.abort(c.resume(fmt.Errorf("pre-upgrade backup interrupted (%v; no archive kept): nothing was activated, %s stays active", context.Cause(ctx), c.old)))
		}
		return c.abort(c.resume(fmt.Errorf("pre-upgrade backup: %w", err)))
	}
	c.res.Backup = c.j.Backup
	if err := c.j.write(c.opts.RuntimeDir, PhaseBackedUp, c.opts.Now()); err != nil {
		return c.abort(c.resume(err))
	}
	if isGone(c.opts.Services) {
		return c.gone()
	}
	return nil
}

// spare is the archive this change's backup must not prune: that of the
// completed change before it (Journal.Prior), "" when none.
func (c *changeRun) spare() string {
	if p := c.j.Prior; p != nil {
		return p.Backup
	}
	return ""
}

// resume ends the hold after a failure before activation and waits until
// the services are healthy again on the old release; the error says
// whether they are, and which were started again.
func (c *changeRun) resume(cause error) error {
	c.held = false
	names, none := "the services", false
	if r, ok := c.hold.(interface{ Running() []string }); ok {
		names, none = "none were running", len(r.Running()) == 0
		if !none {
			names = strings.Join(r.Running(), ", ")
		}
	}
	if rerr := c.hold.Release(); rerr != nil {
		return fmt.Errorf("%w; start the services again (%s): %w", cause, names, rerr)
	}
	if c.opts.Services == nil {
		return fmt.Errorf("%w (no supervisor runs: nothing to start again)", cause)
	}
	if none {
		// Nothing was running (hbx install over a stopped Executor):
		// nothing to wait for, nothing is unhealthy.
		return fmt.Errorf("%w; nothing was running, nothing started again", cause)
	}
	// An interrupted change still learns whether the services run again:
	// the wait is bounded, not cancelled with ctx.
	hctx, cancel := context.WithTimeout(c.undoCtx, c.opts.HealthWait)
	werr := c.opts.Services.WaitHealthy(hctx, c.old)
	cancel()
	if werr != nil {
		return fmt.Errorf("%w; services started again: %s, but not healthy on %s: %w", cause, names, c.old, werr)
	}
	return fmt.Errorf("%w; services started again: %s (healthy on %s)", cause, names, c.old)
}

// gone abandons the change when the supervisor went away while it held
// the services: they died with it, nothing is waited for.
func (c *changeRun) gone() error {
	c.held = false
	kept := ""
	if c.j.Backup != "" {
		kept = fmt.Sprintf(" (the pre-upgrade backup %s is kept)", c.j.Backup)
	}
	return c.abort(fmt.Errorf("%w while the services were held for the pre-upgrade backup: upgrade stopped before activation, %s stays active and configured%s; nothing runs: start hbx supervise", ErrSupervisorGone, c.old.Image, kept))
}

// activate records phase activating, pins the new release in the config
// file, moves current to it and ends the hold. From here on the change
// ends done or rolled back (fail), ctx's cancellation cut nothing short.
// Crash windows "activating": before the config write, after it with
// current not yet moved, and after current moved; Recover rolls back in
// each.
func (c *changeRun) activate() error {
	if err := c.j.write(c.opts.RuntimeDir, PhaseActivating, c.opts.Now()); err != nil {
		return c.abort(c.resume(err))
	}
	c.opts.Step("activating")
	note, err := c.opts.Config.Pin(c.nr)
	if err != nil {
		return c.fail(fmt.Errorf("pin the new release in the config: %w", err))
	}
	if note != "" {
		c.res.Notes = append(c.res.Notes, note)
	}
	if err := c.opts.Runtime.Activate(c.undoCtx, c.nr.ManifestDigest); err != nil {
		return c.fail(fmt.Errorf("activate: %w", err))
	}
	c.held = false
	if err := c.hold.Release(); err != nil {
		return c.fail(fmt.Errorf("start the services: %w", err))
	}
	c.ran = c.opts.Services != nil
	return nil
}

// waitHealthy waits (HealthWait) until the services are healthy on the
// new release. Crash window "activating, current moved": the new release
// runs on data it may write; Recover rolls back, keeping that data aside.
func (c *changeRun) waitHealthy() error {
	c.opts.Step("health")
	killpoint.At(killpoint.UpgradeHealthWait)
	hctx, cancel := context.WithTimeout(c.undoCtx, c.opts.HealthWait)
	hctx, stop := untilGone(hctx, c.opts.Services)
	err := c.opts.Services.WaitHealthy(hctx, c.nr)
	stop()
	cancel()
	if err != nil && isGone(c.opts.Services) {
		return c.fail(fmt.Errorf("%w during the health wait on %s", ErrSupervisorGone, c.nr.Image))
	}
	if err != nil {
		return c.fail(fmt.Errorf("health on %s: %w", c.nr.Image, err))
	}
	return nil
}

// LogsHint ends the error of a change rolled back after the new release
// ran: where its own account of the failure is.
const LogsHint = "see hbx logs executor --stderr"

// fail rolls back after a failure from activation on and returns an
// error wrapping ErrRolledBack and cause, in one line: "rolled back to
// <old image>: <cause>; the data <new image> ran on is kept in <path>"
// ("<new image> never started, the replaced data is kept in <path>" when
// it did not run), then what to do when nothing runs, and LogsHint when
// the new release ran. It names both releases, not "the new runtime": an
// upgrade may go to an older pin, so which is newer says nothing.
func (c *changeRun) fail(cause error) error {
	c.opts.Logger.Error("upgrade failed after activation; rolling back", "err", cause)
	c.releaseHold()
	rb, rerr := rollbackLocked(c.undoCtx, c.opts, c.j, cause.Error())
	if rerr != nil {
		return fmt.Errorf("%w; rollback failed too, the next hbx start retries it: %w", cause, rerr)
	}
	c.res.KeptAside, c.res.Notes = rb.KeptAside, append(c.res.Notes, rb.Notes...)
	kept := fmt.Sprintf("%s never started, the replaced data is kept in %s", c.nr.Image, orNone(rb.KeptAside))
	if c.ran {
		kept = fmt.Sprintf("the data %s ran on is kept in %s", c.nr.Image, orNone(rb.KeptAside))
	}
	if isGone(c.opts.Services) {
		kept += "; nothing runs: start hbx supervise"
	}
	if c.ran {
		kept += "; " + LogsHint
	}
	return fmt.Errorf("%w to %s: %w; %s", ErrRolledBack, c.old.Image, cause, kept)
}

// finish records phase done. Crash window "done": nothing to do.
func (c *changeRun) finish(ctx context.Context) error {
	if ctx.Err() != nil {
		c.res.Notes = append(c.res.Notes, "interrupted after activation: the change was finished, not cut short")
	}
	if err := c.j.write(c.opts.RuntimeDir, PhaseDone, c.opts.Now()); err != nil {
		return err
	}
	c.opts.Step("done")
	return nil
}

// noHold is the Hold of a Switch without a supervisor: nothing to release.
type noHold struct{}

func (noHold) Release() error { return nil }
