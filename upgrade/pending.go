package upgrade

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/procscan"
)

// LockHolder returns the live process holding runtimeDir's lock (LockFile),
// or false when none does; see lock.LiveHolder.
func LockHolder(runtimeDir string) (lock.Holder, bool) {
	return lock.LiveHolder(filepath.Join(runtimeDir, LockFile))
}

// HolderNote says what keeps a live lock holder from finishing: "" unless
// it is stopped (SIGSTOP, a debugger), which holds the change, and the
// programs it holds stopped, for as long as it stays so. The note starts
// with "; " to follow a sentence.
func HolderNote(h lock.Holder) string {
	st, err := procscan.ReadStat(h.PID)
	if err != nil || st.State != 'T' && st.State != 't' {
		return ""
	}
	return fmt.Sprintf("; pid %d is stopped: `kill -CONT %d` lets it finish, `kill -KILL %d` lets the running hbx supervise undo the change", h.PID, h.PID, h.PID)
}

// PendingNote says what j, an unfinished change (Pending) of runtimeDir,
// is and what to run: in progress while holder holds the lock (held),
// else interrupted, which the running hbx supervise, hbx rollback or a
// new hbx supervise undoes.
func (j *Journal) PendingNote(runtimeDir string, holder lock.Holder, held bool) string {
	what := "upgrade"
	if j.By != "" {
		what = "release change (" + j.By + ")"
	}
	if held {
		return fmt.Sprintf("%s from %s to %s in progress (phase %s since %s; %s holds %s%s)", what, j.Old.Image, j.New.Image, j.Phase, j.Updated.Format(time.RFC3339), holder, LockFile, HolderNote(holder))
	}
	return fmt.Sprintf("%s to %s interrupted in phase %s at %s (%s), never confirmed healthy: the running hbx supervise rolls it back to %s within seconds (the data written meanwhile is kept aside), or run `hbx rollback` or start `hbx supervise`",
		what, j.New.Image, j.Phase, j.Updated.Format(time.RFC3339), journalPath(runtimeDir), j.Old.Image)
}

// RecoveryNote says, after the recovery of an interrupted change rolled
// it back, where the data written meanwhile is kept, for as long as that
// copy exists; "" otherwise (also when the journal does not read).
func RecoveryNote(runtimeDir string) string {
	j, err := ReadJournal(runtimeDir)
	if err != nil || j == nil || !j.Recovered || j.Phase != PhaseRolledBack || j.KeptAside == "" {
		return ""
	}
	if _, err := os.Stat(j.KeptAside); err != nil {
		return ""
	}
	return fmt.Sprintf("the interrupted upgrade to %s was rolled back at %s: %s runs on the pre-upgrade data; the data written meanwhile is kept in %s (hbx backup list shows it; this note goes once that copy is removed)", j.New.Image, j.Updated.Format(time.RFC3339), j.Old.Image, j.KeptAside)
}

// ErrHalfDone: a command that would change the runtime directory
// (hbx install, the supervisor's install on start) refuses while
// upgrade.json records a release change that is not finished
// (HalfDone).
var ErrHalfDone = errors.New("an upgrade is half done")

// HalfDone returns nil when runtimeDir's journal records no unfinished
// release change (Journal.Pending), else an error wrapping ErrHalfDone
// that names the change and what to do: while a command holds the lock
// making it, wait for it; interrupted, `hbx rollback` or a restart of
// hbx supervise, which undo it (an install would change the runtime
// without the data that goes with it, and its cleanup could remove a
// release the recovery needs). locked says the caller holds runtimeDir's
// lock itself (the change is then interrupted). A journal that does not
// read is its read error.
func HalfDone(runtimeDir string, locked bool) error {
	j, err := ReadJournal(runtimeDir)
	if err != nil {
		return err
	}
	if j == nil || !j.Pending() {
		return nil
	}
	by := j.By
	if by == "" {
		by = "hbx upgrade"
	}
	what := fmt.Sprintf("the release change (%s) from %s to %s", by, j.Old.Image, j.New.Image)
	if holder, held := LockHolder(runtimeDir); held && !locked {
		return fmt.Errorf("%w: %s is in progress (phase %s since %s; %s holds %s%s): let it finish first",
			ErrHalfDone, what, j.Phase, j.Updated.Format(time.RFC3339), holder, LockFile, HolderNote(holder))
	}
	return fmt.Errorf("%w: %s was interrupted in phase %s (%s); an install now would change the runtime without the data that goes with it: run `hbx rollback` to undo it, or restart `hbx supervise`, which undoes it first",
		ErrHalfDone, what, j.Phase, journalPath(runtimeDir))
}
