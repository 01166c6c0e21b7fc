package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/upgrade"
)

// errChangePending is wrapped by the error pendingChange returns: a
// release change (upgrade.json) or a restore (<data_dir>.restore.json) is
// half done, so what runs is not confirmed; `hbx health` (check release)
// and `hbx status` fail with it.
var errChangePending = errors.New("a release change is not finished")

// changePendingError is pendingChange's error; exitCode maps it to
// exitNotRunning for `hbx status`.
type changePendingError struct{ msg string }

func (e *changePendingError) Error() string { return e.msg }

// Unwrap makes errors.Is(err, errChangePending) true.
func (e *changePendingError) Unwrap() error { return errChangePending }

// pendingChange returns a *changePendingError naming a release change or
// restore of cfg's box that is not finished, with what to run; nil when
// there is none. In progress: the process that holds the lock. Interrupted
// (its command died): the running hbx supervise undoes it within seconds,
// or hbx rollback / hbx backup do.
func pendingChange(cfg *config.Config) error {
	rt := cfg.Executor.RuntimeDir
	holder, held := upgrade.LockHolder(rt)
	if r, err := backup.ReadPendingRestore(cfg.Executor.DataDir); err != nil {
		return &changePendingError{fmt.Sprintf("restore journal: %v", err)}
	} else if r != nil && r.Unfinished() {
		if held {
			return &changePendingError{fmt.Sprintf("restore of %s in progress (phase %s since %s; %s holds %s%s)", r.Archive, r.Phase, r.Started.Format(time.RFC3339), holder, upgrade.LockFile, upgrade.HolderNote(holder))}
		}
		return &changePendingError{fmt.Sprintf("restore of %s interrupted in phase %s (started %s; %s): its data is not confirmed; the running hbx supervise undoes it within seconds, or run `hbx backup` or start `hbx supervise`, which undo it first", r.Archive, r.Phase, r.Started.Format(time.RFC3339), r.Journal)}
	}
	j, err := upgrade.ReadJournal(rt)
	if err != nil {
		return &changePendingError{err.Error()}
	}
	if j == nil || !j.Pending() {
		return nil
	}
	return &changePendingError{j.PendingNote(rt, holder, held)}
}

// changeWatchInterval is how often a running supervisor looks for a
// release change or restore whose command died.
const changeWatchInterval = time.Second

// watchedBox is upgrade.WatchedBox over cfg, the configuration of one
// round of hbx supervise's change watch.
type watchedBox struct {
	g   *globals
	cfg *config.Config
}

func (b watchedBox) Pending() error { return pendingChange(b.cfg) }
func (b watchedBox) Holder() (lock.Holder, bool) {
	return upgrade.LockHolder(b.cfg.Executor.RuntimeDir)
}
func (b watchedBox) RecoverChange(ctx context.Context) bool {
	return recoverUpgrade(ctx, b.g, b.cfg, true)
}

// RecoverRestore undoes an interrupted restore through the running
// supervisor, then waits (backup.health_wait) for the programs that
// should run, logging when they are not healthy.
func (b watchedBox) RecoverRestore(ctx context.Context) error {
	c, g := b.cfg, b.g
	if r, err := backup.ReadPendingRestore(c.Executor.DataDir); err != nil || r == nil {
		// Unreadable: nothing can be undone by it, nor the upgrade
		// behind it.
		return err
	}
	svc, err := dialServices(ctx, g, c)
	if err != nil {
		return err
	}
	opts := backup.RecoverOptions{DataDir: c.Executor.DataDir, RuntimeDir: c.Executor.RuntimeDir, Runtime: installRuntime{g: g, cfg: c}, Config: restorePinner{g: g, cfg: c}, Logger: g.log}
	if svc != nil {
		opts.Services = svc
		defer svc.Close()
	}
	msg, err := backup.Recover(ctx, opts)
	if err != nil || msg == "" {
		return err
	}
	g.log.Warn("interrupted restore recovered by the running supervisor", "what", msg)
	if svc != nil {
		// The programs that should run, also those FATAL on the mismatch
		// the restore left, start again.
		hctx, cancel := context.WithTimeout(ctx, c.Backup.HealthWait)
		defer cancel()
		if werr := svc.WaitHealthy(hctx); werr != nil {
			g.log.Error("after undoing the interrupted restore, the programs are not healthy", "err", werr)
		}
	}
	return nil
}
