package upgrade

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/release"
)

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
	res, err = rollbackLast(ctx, opts)
	if err != nil {
		return nil, err
	}
	res.Duration = time.Since(start)
	return res, nil
}

// rollbackLast is Rollback under the lock: it recovers an interrupted
// change (that is then the rollback), or undoes the last completed one.
func rollbackLast(ctx context.Context, opts Options) (*Result, error) {
	pre, err := ReadJournal(opts.RuntimeDir)
	if err != nil {
		return nil, fmt.Errorf("recover an interrupted upgrade: %w", err)
	}
	var prePhase Phase
	if pre != nil {
		prePhase = pre.Phase
	}
	recovered, j, err := recoverJournal(ctx, opts, pre)
	if err != nil {
		return nil, fmt.Errorf("recover an interrupted upgrade: %w", err)
	}
	// A change that died before activation changed nothing: closing it
	// was the rollback asked for, even when that put back the journal of
	// a completed change before it (Journal.Prior), which stays.
	if recovered != "" && (prePhase == PhaseStaged || prePhase == PhaseBackedUp) {
		return &Result{Old: pre.New, New: pre.Old, Backup: pre.Backup, Recovered: recovered, Interrupted: true}, nil
	}
	cur, curErr := opts.Runtime.Active()
	// A change interrupted before this command was undone by the recovery
	// just now: that was the rollback asked for.
	if recovered != "" && j != nil && curErr == nil && (j.Phase == PhaseRolledBack || j.Phase == PhaseAborted) && cur.Equal(j.Old.Target) {
		return &Result{Old: j.New, New: j.Old, Backup: j.Backup, KeptAside: j.KeptAside, Recovered: recovered, Interrupted: true}, nil
	}
	if err := closedByRecovery(j); err != nil {
		return nil, err
	}
	failed := j
	// After a recovery undid the last change, the rollback asked for was
	// that one (rollbackable refuses, naming the way further back): no
	// second step back is taken on a race with the supervisor.
	if last := j.lastCompleted(); last != nil && !j.Recovered && curErr == nil && cur.Equal(j.Old.Target) {
		j = last // see lastCompleted
	}
	if err := rollbackable(opts.RuntimeDir, j, cur, curErr); err != nil {
		return nil, err
	}
	if err := checkPreUpgrade(opts, j); err != nil {
		return nil, err
	}
	// previous stays at the release rolled back from (the journal's
	// Previous is for undoing an unfinished change).
	j.Previous = nil
	res, err := rollbackLocked(ctx, opts, j, rollbackBy)
	if err != nil {
		return nil, err
	}
	if failed != j {
		res.Notes = append(res.Notes, fmt.Sprintf("the last change, to %s, rolled itself back at %s: this undid the completed one before it, from %s to %s", failed.New.Image, failed.Updated.Format(time.RFC3339), j.Old.Image, j.New.Image))
	}
	res.Recovered = recovered
	return res, nil
}

// closedByRecovery refuses (ErrNoUpgrade) when j is a completed change
// a recovery put back after closing the change that followed it
// (Journal.ClosedNext), naming that one and the archive that undoes j.
func closedByRecovery(j *Journal) error {
	if j == nil || j.Phase != PhaseDone || j.ClosedNext == "" {
		return nil
	}
	return fmt.Errorf("%w: the last %s, closed by the recovery of its killed command (nothing of it was active); the one before it stays, the %s (to undo it too, hbx restore %s)", ErrNoUpgrade, j.ClosedNext, j.describe(), j.Backup)
}

// rollbackBy is Journal.Error of a change hbx rollback undid (kept when
// a recovery finishes that rollback: recoverJournal).
const rollbackBy = "hbx rollback"

// undoneByRollback reports whether hbx rollback undid (or began to undo)
// the change j records, or may have: an hbx before this one recorded the
// recovery that finished any rollback as "interrupted during
// rolling-back" (finishedByEarlierRecovery), hbx rollback's among them.
func (j *Journal) undoneByRollback() bool {
	return j.Error == rollbackBy || j.Recovered && j.Error == finishedByEarlierRecovery
}

// finishedByEarlierRecovery is Journal.Error of a rollback an hbx before
// this one's recovery finished, whatever began it; this one keeps the
// reason (recoverJournal), never writing it.
const finishedByEarlierRecovery = "interrupted during " + string(PhaseRollingBack)

// rollbackable refuses (ErrNoUpgrade) unless j records a completed change
// and cur, the active release (curErr: none), is the one it left active.
// It only reads.
func rollbackable(runtimeDir string, j *Journal, cur Release, curErr error) error {
	active := "no release is active"
	if curErr == nil {
		active = "the active release is " + cur.Image
	}
	// What the journal leaves active: the new release after a completed
	// change, the old one after a rollback or an abort.
	expected := j != nil && curErr == nil && (j.Phase == PhaseDone && cur.Equal(j.New.Target) || j.Phase != PhaseDone && cur.Equal(j.Old.Target))
	switch {
	case j == nil:
		return fmt.Errorf("%w: none was recorded in %s (%s)", ErrNoUpgrade, runtimeDir, active)
	case !expected:
		// The release changed after the recorded change, without a
		// record (an older hbx install, or by hand): say so, not what
		// the journal says about another release.
		if curErr == nil {
			active = "the active release " + cur.Image
		}
		return fmt.Errorf("%w: %s was installed without a record; the last recorded %s", ErrNoUpgrade, active, j.describe())
	case j.Phase != PhaseDone && j.Recovered:
		// Undone by a recovery (the running supervisor, a restart) before
		// this command: say what it did, and where the data went. The
		// rollback asked for was that one (a second step back is not
		// taken on a race with the supervisor).
		by := "undone by the recovery of the interrupted change"
		if j.Error == rollbackBy {
			by = "undone by hbx rollback (killed, then finished by the recovery)"
		}
		return fmt.Errorf("%w: the last recorded %s, %s; the data written meanwhile is kept in %s%s", ErrNoUpgrade, j.describeActiveOld(), by, orNone(j.KeptAside), j.priorWay())
	case j.Phase != PhaseDone:
		return fmt.Errorf("%w: the last recorded %s%s", ErrNoUpgrade, j.describeActiveOld(), j.noPrior())
	}
	return nil
}

// lastCompleted is the completed change j's failed one followed
// (Journal.Prior), when j ended without completing: rolled back by its
// own command, or by the recovery of its killed command (Recovered: the
// pre-upgrade data and j.Old are back, so the completed change that made
// j.Old active stands again), or aborted. nil otherwise: j completed, hbx
// rollback undid j (undoneByRollback), or none was recorded. When j's old
// release is still active, that completed change is the last upgrade:
// the next change carries it as its Prior (changeRun.begin), and hbx
// rollback undoes it, unless a recovery undid j (Rollback). A completed
// change hbx rollback undid keeps the Prior it was written with (this hbx
// and earlier ones): that one is not the last upgrade, the change rolled
// back already is.
func (j *Journal) lastCompleted() *Journal {
	if j == nil || j.Prior == nil || j.undoneByRollback() || j.Phase != PhaseRolledBack && j.Phase != PhaseAborted {
		return nil
	}
	if p := j.Prior; p.Phase == PhaseDone && p.New.Equal(j.Old.Target) {
		return p
	}
	return nil
}

// priorWay names, for a refusal after a recovery, the completed change
// before j and the archive that goes back past it; "" when none.
func (j *Journal) priorWay() string {
	if p := j.Prior; p != nil && p.Phase == PhaseDone && p.Backup != "" {
		return fmt.Sprintf("; to go back past the completed %s too, hbx restore %s", p.describe(), p.Backup)
	}
	return ""
}

// noPrior says, for a refusal after a change that rolled itself back,
// why previous is no rollback target: no completed change before it is
// recorded, so no pre-upgrade backup goes with previous.
func (j *Journal) noPrior() string {
	if j.Phase != PhaseRolledBack || j.Recovered || j.undoneByRollback() {
		return ""
	}
	return ", by the change itself when it failed; no completed change before it is recorded, so no pre-upgrade backup goes with previous (hbx backup list; hbx restore ARCHIVE goes back to an archive's release)"
}

// checkPreUpgrade refuses (ErrMismatch) unless previous is the release j
// replaced and j's pre-upgrade archive records it. It only reads.
func checkPreUpgrade(opts Options, j *Journal) error {
	prev, err := opts.Runtime.Previous()
	if err != nil {
		return fmt.Errorf("%w: previous: %w", ErrNoUpgrade, err)
	}
	if !prev.Equal(j.Old.Target) {
		return fmt.Errorf("%w: previous is %s, the pre-upgrade backup was made for %s", ErrMismatch, prev, j.Old)
	}
	index, manifest, err := opts.Data.Recorded(j.Backup)
	if err == nil && !(release.Target{IndexDigest: index, ManifestDigest: manifest}).Equal(j.Old.Target) {
		err = fmt.Errorf("the archive records index %s manifest %s, previous is index %s manifest %s", index, manifest, j.Old.IndexDigest, j.Old.ManifestDigest)
	}
	if err != nil {
		return fmt.Errorf("%w: pre-upgrade backup %s: %w", ErrMismatch, j.Backup, err)
	}
	return nil
}

// rollbackLocked puts j.Old and the pre-upgrade data back, under the lock:
// phase rolling-back, the old pin, the restore with the old runtime (which
// moves the replaced data to a rolled-back copy), phase rolled-back. Crash window
// "rolling-back": Recover does it all again from its start (each step is
// idempotent; backup's own journal undoes a half-done restore).
func rollbackLocked(ctx context.Context, opts Options, j *Journal, why string) (*Result, error) {
	j.Error = why
	since := opts.Now()
	if j.Phase == PhaseRollingBack {
		// Done again by a recovery: since the first attempt (an hbx
		// before this one recorded only when it entered the phase).
		since = j.RollingBackSince
		if since.IsZero() {
			since = j.Updated
		}
	}
	j.RollingBackSince = since
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
	kept, err := opts.Data.Restore(ctx, j.Backup, j.Old)
	aside := kept.Data
	if err != nil {
		return nil, fmt.Errorf("restore the pre-upgrade backup %s: %w", j.Backup, err)
	}
	if err := restorePrevious(ctx, opts, j, res); err != nil {
		return nil, err
	}
	if aside != "" {
		keepRolledBack(opts, aside, since, res)
	}
	noteExtraKept(opts, kept.Extra, res)
	j.KeptAside, j.RollingBackSince = res.KeptAside, time.Time{}
	if err := j.write(opts.RuntimeDir, PhaseRolledBack, opts.Now()); err != nil {
		return nil, err
	}
	opts.Step("rolled-back")
	return res, nil
}

// restorePrevious points previous back at the release it named when j's
// change began (Journal.Previous; nothing when not recorded): the
// restore reactivated j.Old, which pointed previous at the failed
// release. When that release is no longer on disk previous is removed,
// noted once (res.Notes and the log). Crash window: previous names the
// failed release or the recorded one; Recover does it again.
func restorePrevious(ctx context.Context, opts Options, j *Journal, res *Result) error {
	if j.Previous == nil {
		return nil
	}
	var manifest digest.Digest
	if r := j.Previous.Release; r != nil {
		manifest = r.ManifestDigest
	}
	found, err := opts.Runtime.SetPrevious(ctx, manifest)
	if err != nil {
		return fmt.Errorf("point previous back: %w", err)
	}
	if !found {
		note := fmt.Sprintf("the release previous named before the change, %s, is no longer on disk: no previous release is kept", j.Previous.Release)
		opts.Logger.Warn(note)
		res.Notes = append(res.Notes, note)
	}
	return nil
}

// keepRolledBack records aside, where the rollback's restore kept the
// data it replaced, as res.KeptAside and prunes older rolled-back copies
// (KeepRolledBack), noting what it removed. It never removes aside, nor a
// copy stamped since the rollback began (since): an earlier attempt of
// this rollback, killed after its restore committed, moved the newer data
// there, and the restore done again kept what it found as aside. The
// restore moved that data straight to <DataDir>.rolled-back-<UTC time>
// in its swap (Data.Restore): a failure of that move undid the restore,
// so no rename is left here that could fail and leave the only copy of
// the newer data where a later restore prunes pre-restore copies.
func keepRolledBack(opts Options, aside string, since time.Time, res *Result) {
	res.KeptAside = aside
	opts.Logger.Info("replaced data kept as a rolled-back copy", "path", aside)
	spare := []string{aside}
	from, to := since.Truncate(time.Second), opts.Now()
	parent, base := filepath.Split(opts.DataDir)
	ents, _ := os.ReadDir(parent) // unreadable: Prune says so
	for _, e := range ents {
		p := filepath.Join(parent, e.Name())
		if t, ok := datadir.RolledBack.Created(base, e.Name()); ok && e.IsDir() && p != aside && !t.Before(from) && !t.After(to) {
			spare = append(spare, p)
			res.Notes = append(res.Notes, fmt.Sprintf("kept %s too: an earlier attempt of this rollback, cut short, moved the data it replaced there", p))
		}
	}
	pruned, err := datadir.Prune(opts.DataDir, datadir.RolledBack, max(opts.KeepRolledBack, 1), spare...)
	for _, p := range pruned {
		res.Notes = append(res.Notes, fmt.Sprintf("removed the older rolled-back copy %s (backup.keep_pre_restore)", p))
	}
	if err != nil {
		opts.Logger.Warn("prune rolled-back copies", "err", err)
	}
}

// noteExtraKept says where the rollback's restore kept what it replaced
// in each extra backup.paths directory (extra: directory to copy), in
// res.Notes and the log. Those copies are never pruned: only the data
// directory's rolled-back copies are (KeepRolledBack).
func noteExtraKept(opts Options, extra map[string]string, res *Result) {
	for _, dir := range slices.Sorted(maps.Keys(extra)) {
		if p := extra[dir]; p != "" {
			opts.Logger.Info("replaced data kept as a rolled-back copy", "path", p)
			res.Notes = append(res.Notes, fmt.Sprintf("kept what the rollback replaced in %s as %s (never pruned: remove it once not needed)", dir, p))
		}
	}
}

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

// recoverLocked is recoverJournal on the journal runtimeDir holds now.
func recoverLocked(ctx context.Context, opts Options) (string, error) {
	j, err := ReadJournal(opts.RuntimeDir)
	if err != nil {
		return "", err
	}
	msg, _, err := recoverJournal(ctx, opts, j)
	return msg, err
}

// recoverJournal finishes or undoes the change j (the journal on disk,
// read under the lock; nil: none) records when it is unfinished, and
// returns what it did ("" when nothing) and the journal on disk after it:
// j, or the completed change before it that closing j put back
// (Journal.close).
func recoverJournal(ctx context.Context, opts Options, j *Journal) (string, *Journal, error) {
	if j == nil || !pending(j.Phase) {
		return "", j, nil
	}
	switch j.Phase {
	case PhaseStaged, PhaseBackedUp:
		if j.Prior != nil {
			j.Prior.ClosedNext = j.describe()
		}
		if err := j.close(opts.RuntimeDir, "interrupted before activation", opts.Now()); err != nil {
			return "", nil, err
		}
		after := j
		if j.Prior != nil {
			after = j.Prior
		}
		return fmt.Sprintf("closed the upgrade to %s, interrupted before activation: %s stays active", j.New.Image, j.Old.Image), after, nil
	}
	if j.Backup == "" {
		return "", nil, unrecoverable(opts.RuntimeDir, fmt.Errorf("%w: journal phase %s without a backup", ErrMismatch, j.Phase))
	}
	why := "interrupted during " + string(j.Phase)
	if j.Phase == PhaseRollingBack && j.Error != "" {
		// Finishing a rollback: it keeps the reason it began for, hbx
		// rollback's among them (undoneByRollback).
		why = j.Error
	}
	j.Recovered = true
	res, err := rollbackLocked(ctx, opts, j, why)
	if err != nil {
		return "", nil, unrecoverable(opts.RuntimeDir, err)
	}
	return fmt.Sprintf("rolled back the interrupted upgrade from %s to %s: %s is active again, on the pre-upgrade data; the data written meanwhile is in %s", j.Old.Image, j.New.Image, j.Old.Image, orNone(res.KeptAside)), j, nil
}

// unrecoverable is err, a recovery of the interrupted change in
// runtimeDir's journal that failed, ending with the way out when it keeps
// failing (a damaged or forged journal, a lost backup): every command
// that refuses while the change is unfinished (hbx install, hbx upgrade)
// names hbx rollback, which gives this error. A recovery that was
// cancelled or ran out of time (Ctrl-C, a shutdown) is err alone: run
// again, it may well succeed.
func unrecoverable(runtimeDir string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w; if the recovery keeps failing, move %s away once the active release (hbx status) and the data directory are checked by hand", err, journalPath(runtimeDir))
}

func orNone(s string) string {
	if s == "" {
		return "(nothing was replaced)"
	}
	return s
}
