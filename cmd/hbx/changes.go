package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/procscan"
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

// lockHolder returns the live process holding the runtime directory's
// lock, or false when none does (free, or its holder died: the kernel
// dropped the flock, its record is stale). The record outlives a holder
// killed with SIGKILL and its pid may since name another process, so a
// live pid holds the lock only when it has the lock file open; when its
// descriptors cannot be read (another user's process) the record is
// trusted.
func lockHolder(runtimeDir string) (lock.Holder, bool) {
	path := filepath.Join(runtimeDir, upgrade.LockFile)
	h := lock.ReadHolder(path)
	if h.PID <= 0 {
		return h, false
	}
	if err := syscall.Kill(h.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return h, false
	}
	id, err := procscan.IDOfPath(path)
	if err != nil {
		return h, false
	}
	if _, err := os.ReadDir("/proc/" + strconv.Itoa(h.PID) + "/fd"); err != nil {
		return h, true
	}
	return h, procscan.Holds(h.PID, id)
}

// holderNote says what keeps a live lock holder from finishing: "" unless
// it is stopped (SIGSTOP, a debugger), which holds the change, and the
// programs it holds stopped, for as long as it stays so.
func holderNote(h lock.Holder) string {
	st, err := procscan.ReadStat(h.PID)
	if err != nil || st.State != 'T' && st.State != 't' {
		return ""
	}
	return fmt.Sprintf("; pid %d is stopped: `kill -CONT %d` lets it finish, `kill -KILL %d` lets the running hbx supervise undo the change", h.PID, h.PID, h.PID)
}

// pendingChange returns a *changePendingError naming a release change or
// restore of cfg's box that is not finished, with what to run; nil when
// there is none. In progress: the process that holds the lock. Interrupted
// (its command died): the running hbx supervise undoes it within seconds,
// or hbx rollback / hbx backup do.
func pendingChange(cfg *config.Config) error {
	rt := cfg.Executor.RuntimeDir
	holder, held := lockHolder(rt)
	if r, err := backup.ReadPendingRestore(cfg.Executor.DataDir); err != nil {
		return &changePendingError{fmt.Sprintf("restore journal: %v", err)}
	} else if r != nil && r.Unfinished() {
		if held {
			return &changePendingError{fmt.Sprintf("restore of %s in progress (phase %s since %s; %s holds %s%s)", r.Archive, r.Phase, r.Started.Format(time.RFC3339), holder, upgrade.LockFile, holderNote(holder))}
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
	what := "upgrade"
	if j.By != "" {
		what = "release change (" + j.By + ")"
	}
	if held {
		return &changePendingError{fmt.Sprintf("%s from %s to %s in progress (phase %s since %s; %s holds %s%s)", what, j.Old.Image, j.New.Image, j.Phase, j.Updated.Format(time.RFC3339), holder, upgrade.LockFile, holderNote(holder))}
	}
	return &changePendingError{fmt.Sprintf("%s to %s interrupted in phase %s at %s (%s), never confirmed healthy: the running hbx supervise rolls it back to %s within seconds (the data written meanwhile is kept aside), or run `hbx rollback` or start `hbx supervise`",
		what, j.New.Image, j.Phase, j.Updated.Format(time.RFC3339), filepath.Join(rt, upgrade.JournalFile), j.Old.Image)}
}

// recoveryNote says, after the recovery of an interrupted change rolled
// it back, where the data written meanwhile is kept, for as long as that
// copy exists; "" otherwise.
func recoveryNote(cfg *config.Config) string {
	j, err := upgrade.ReadJournal(cfg.Executor.RuntimeDir)
	if err != nil || j == nil || !j.Recovered || j.Phase != upgrade.PhaseRolledBack || j.KeptAside == "" {
		return ""
	}
	if _, err := os.Stat(j.KeptAside); err != nil {
		return ""
	}
	return fmt.Sprintf("the interrupted upgrade to %s was rolled back at %s: %s runs on the pre-upgrade data; the data written meanwhile is kept in %s (hbx backup list shows it)", j.New.Image, j.Updated.Format(time.RFC3339), j.Old.Image, j.KeptAside)
}

// changeWatchInterval is how often a running supervisor looks for a
// release change or restore whose command died.
const changeWatchInterval = time.Second

// watchChanges resolves, while the supervisor runs, a release change or a
// restore whose command died (its journal is unfinished and no process
// holds the runtime directory's lock): every interval it runs the
// recovery the next hbx supervise would run, through this supervisor
// (the programs held, then started and health-checked), and logs what it
// did. cfg returns the configuration as it is now. It returns when ctx
// ends.
func watchChanges(ctx context.Context, g *globals, cfg func() *config.Config, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var retry time.Time    // after a failed recovery, not before
	var warned lock.Holder // the stopped holder last named in the log
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Now().Before(retry) {
			continue
		}
		c := cfg()
		if err := pendingChange(c); err == nil {
			continue
		} else if h, held := lockHolder(c.Executor.RuntimeDir); held {
			// A stopped holder keeps the change, and maybe the programs
			// held, until it goes on or dies: said once per holder.
			if note := holderNote(h); note != "" && h != warned {
				g.log.Warn("a release change or restore is held by a stopped process", "err", err)
				warned = h
			}
			continue
		}
		killpoint.Hold(killpoint.SupervisorRecovery)
		if ctx.Err() != nil {
			return
		}
		r, err := backup.ReadPendingRestore(c.Executor.DataDir)
		if err != nil {
			// Unreadable: nothing can be undone by it, nor the upgrade
			// behind it; say so, not every second.
			g.log.Error("an interrupted restore could not be recovered; retrying in a minute", "err", err)
			retry = time.Now().Add(time.Minute)
			continue
		}
		if r != nil {
			svc, err := dialServices(ctx, g, c)
			if err == nil {
				opts := backup.RecoverOptions{DataDir: c.Executor.DataDir, RuntimeDir: c.Executor.RuntimeDir, Runtime: installRuntime{g: g, cfg: c}, Config: restorePinner{g: g, cfg: c}, Logger: g.log}
				if svc != nil {
					opts.Services = svc
				}
				var msg string
				msg, err = backup.Recover(ctx, opts)
				if err == nil && msg != "" {
					g.log.Warn("interrupted restore recovered by the running supervisor", "what", msg)
					if svc != nil {
						// The programs that should run, also those FATAL on
						// the mismatch the restore left, start again.
						hctx, cancel := context.WithTimeout(ctx, c.Backup.HealthWait)
						if werr := svc.WaitHealthy(hctx); werr != nil {
							g.log.Error("after undoing the interrupted restore, the programs are not healthy", "err", werr)
						}
						cancel()
					}
				}
				if svc != nil {
					svc.Close()
				}
			}
			if err != nil {
				g.log.Error("an interrupted restore could not be recovered; retrying in a minute", "err", err)
				retry = time.Now().Add(time.Minute)
				continue
			}
		}
		if recoverUpgrade(ctx, g, c, true) {
			retry = time.Now().Add(time.Minute)
		}
	}
}
