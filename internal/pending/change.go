package pending

import (
	"errors"
	"fmt"
	"time"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/upgrade"
)

// ErrChange is wrapped by the error Change returns: a
// release change (upgrade.json) or a restore (<data_dir>.restore.json) is
// half done, so what runs is not confirmed; `hbx health` (check release)
// and `hbx status` fail with it.
var ErrChange = errors.New("a release change is not finished")

// ChangeError is Change's error; cmd/hbx maps it to exit 3
// for `hbx status`.
type ChangeError struct {
	msg   string
	brief string // a short form ("restore awaits runtime IMAGE"); "" none
}

// Error says what is half done and what to run, in one line.
func (e *ChangeError) Error() string { return e.msg }

// Brief is a short form of Error, for a line that follows the whole one;
// Error when it has none.
func (e *ChangeError) Brief() string {
	if e.brief != "" {
		return e.brief
	}
	return e.msg
}

// Unwrap makes errors.Is(err, ErrChange) true.
func (e *ChangeError) Unwrap() error { return ErrChange }

// Change returns a *ChangeError naming a release change or
// restore of cfg's box that is not finished, with what to run; nil when
// there is none. In progress: the process that holds the lock. Interrupted
// (its command died): the running hbx supervise undoes it within seconds,
// or hbx rollback / hbx backup do.
func Change(cfg *config.Config) error {
	rt := cfg.Executor.RuntimeDir
	holder, held := upgrade.LockHolder(rt)
	if r, err := backup.ReadPendingRestore(cfg.Executor.DataDir); err != nil {
		return &ChangeError{msg: fmt.Sprintf("restore journal: %v", err)}
	} else if r != nil && r.NotStarted() {
		// Restored without its runtime: status exits 3 until it runs,
		// also while a command holds the lock (an install, a backup).
		if aerr := backup.AwaitedRuntime(cfg.Executor.DataDir, rt); aerr != nil {
			var ae *backup.AwaitedError
			if errors.As(aerr, &ae) {
				return &ChangeError{msg: aerr.Error(), brief: "restored data " + ae.Brief()}
			}
			return &ChangeError{msg: aerr.Error()}
		}
		return &ChangeError{msg: fmt.Sprintf("restore of %s, done without its runtime, is not finished: %s is installed now; the running hbx supervise starts it within seconds, or start hbx supervise (%s)", r.Archive, r.Awaiting, r.Journal)}
	} else if r != nil && r.Unfinished() {
		if held {
			return &ChangeError{msg: fmt.Sprintf("restore of %s in progress (phase %s since %s; %s holds %s%s)", r.Archive, r.Phase, r.Started.Format(time.RFC3339), holder, upgrade.LockFile, upgrade.HolderNote(holder))}
		}
		return &ChangeError{msg: fmt.Sprintf("restore of %s interrupted in phase %s (started %s; %s): its data is not confirmed; the running hbx supervise undoes it within seconds, or run `hbx backup` or start `hbx supervise`, which undo it first", r.Archive, r.Phase, r.Started.Format(time.RFC3339), r.Journal)}
	}
	j, err := upgrade.ReadJournal(rt)
	if err != nil {
		return &ChangeError{msg: err.Error()}
	}
	if j == nil || !j.Pending() {
		return nil
	}
	return &ChangeError{msg: j.PendingNote(rt, holder, held)}
}
