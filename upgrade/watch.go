package upgrade

import (
	"context"
	"log/slog"
	"time"

	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/internal/lock"
)

// ChangeWatch resolves, while a supervisor runs, a release change or a
// restore whose command died: its journal is unfinished and no live
// process holds the runtime directory's lock. Each round it runs the
// recovery the next hbx supervise would run (through that supervisor,
// which the caller's functions talk to) and logs what went wrong.
type ChangeWatch struct {
	// Interval is the time between rounds (one second in hbx supervise).
	Interval time.Duration
	// Retry is how long a round waits after a failed recovery (a minute
	// when 0), so a lasting failure is said once a minute, not every
	// round.
	Retry time.Duration
	// Box returns the box as configured now; called once a round.
	Box    func() WatchedBox
	Logger *slog.Logger
}

// WatchedBox is one box, as configured at one round of a ChangeWatch.
type WatchedBox interface {
	// Pending returns nil when no change or restore is unfinished, else
	// an error saying which.
	Pending() error
	// Holder returns the live holder of the runtime directory's lock
	// (LockHolder).
	Holder() (lock.Holder, bool)
	// RecoverRestore finishes or undoes an interrupted restore (package
	// backup's journal); nil when there is none.
	RecoverRestore(ctx context.Context) error
	// RecoverChange finishes or undoes an interrupted release change
	// (Recover) and says whether it failed.
	RecoverChange(ctx context.Context) (failed bool)
}

// watchState is what a ChangeWatch remembers between rounds.
type watchState struct {
	retry  time.Time   // after a failed recovery, not before
	warned lock.Holder // the stopped holder last named in the log
}

// Run watches until ctx ends; see ChangeWatch.
func (w ChangeWatch) Run(ctx context.Context) {
	if w.Retry <= 0 {
		w.Retry = time.Minute
	}
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	var st watchState
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.round(ctx, &st, time.Now())
	}
}

// round is one look at the journals at now: nothing unfinished, or a live
// holder still working on it (a stopped one named once), leaves things
// as they are; otherwise the interrupted restore is resolved first, then
// the release change. A failure postpones the next recovery by Retry.
func (w ChangeWatch) round(ctx context.Context, st *watchState, now time.Time) {
	if now.Before(st.retry) {
		return
	}
	box := w.Box()
	err := box.Pending()
	if err == nil {
		return
	}
	if h, held := box.Holder(); held {
		// A stopped holder keeps the change, and maybe the programs held,
		// until it goes on or dies: said once per holder.
		if note := HolderNote(h); note != "" && h != st.warned {
			w.Logger.Warn("a release change or restore is held by a stopped process", "err", err)
			st.warned = h
		}
		return
	}
	killpoint.Hold(killpoint.SupervisorRecovery)
	if ctx.Err() != nil {
		return
	}
	if err := box.RecoverRestore(ctx); err != nil {
		w.Logger.Error("an interrupted restore could not be recovered; retrying in a minute", "err", err)
		st.retry = time.Now().Add(w.Retry)
		return
	}
	if box.RecoverChange(ctx) {
		st.retry = time.Now().Add(w.Retry)
	}
}
