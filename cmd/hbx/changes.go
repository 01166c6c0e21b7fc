package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/config"
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
