package datadir

import (
	"path/filepath"
	"strings"
	"time"
)

// Lock returns the data lock of dir: a hidden file beside it, named after
// it, "/w/data" -> "/w/.data.lock" (beside, not in: a restore swaps the
// directory itself).
func Lock(dir string) string {
	d := filepath.Clean(dir)
	return filepath.Join(filepath.Dir(d), "."+filepath.Base(d)+".lock")
}

// SupervisorState returns the supervisor's own state directory for the
// data directory dir (its lock, one marker file per program): beside it,
// like its lock, so there is one per box whatever the socket,
// "/w/data" -> "/w/.data.supervisor".
func SupervisorState(dir string) string {
	d := filepath.Clean(dir)
	return filepath.Join(filepath.Dir(d), "."+filepath.Base(d)+".supervisor")
}

// RehearsalLock returns the lock every rehearsal of dir holds while it
// runs (package rehearse): a hidden file beside it, "/w/data" ->
// "/w/.data.rehearsal.lock". A scratch directory (Rehearsal) found while
// holding it is a killed rehearsal's, never a live one's.
func RehearsalLock(dir string) string {
	d := filepath.Clean(dir)
	return filepath.Join(filepath.Dir(d), "."+filepath.Base(d)+".rehearsal.lock")
}

// LockOwner returns the owner lock of dir: Lock(dir) + ".owner".
func LockOwner(dir string) string { return Lock(dir) + ".owner" }

// Journal returns the journal of an unfinished restore of the data
// directory dir: "/w/data" -> "/w/data.restore.json".
func Journal(dir string) string { return dir + ".restore.json" }

// Kind is a kind of directory hbx sets beside dir, named
// <dir>.<kind>-<stamp>; its string is what `hbx backup list` shows for
// kept copies.
type Kind string

// Kinds of directories beside dir.
const (
	// Staging: <dir>.restore-<stamp>[-N], the archive extracted, before
	// the restore swaps it in.
	Staging Kind = "restore"
	// PreRestore: <dir>.pre-restore-<stamp>[-N], the data a restore
	// replaced (backup.keep_pre_restore copies are kept).
	PreRestore Kind = "pre-restore"
	// RolledBack: <dir>.rolled-back-<stamp>, the data a rollback replaced:
	// what the newer release wrote.
	RolledBack Kind = "rolled-back"
	// Rehearsal: <dir>.rehearsal-<random>, the private scratch copy a
	// rehearsal boots a staged release on (package rehearse); removed
	// after it, or as a leftover by the next one.
	Rehearsal Kind = "rehearsal"
)

// Kept lists the kinds of kept copies of replaced data, in the order
// `hbx backup list` looks for them.
var Kept = []Kind{PreRestore, RolledBack}

// infix is what stands between dir and the stamp: ".<kind>-".
func (k Kind) infix() string { return "." + string(k) + "-" }

// Path returns dir's directory of kind k for suffix, a stamp with an
// optional "-N": Path("/w/data", "20261201T101500Z") ->
// "/w/data.pre-restore-20261201T101500Z" for PreRestore.
func (k Kind) Path(dir, suffix string) string { return dir + k.infix() + suffix }

// Of reports whether name (a base name in dir's parent) is a directory of
// kind k beside the directory whose base name is base.
func (k Kind) Of(base, name string) bool { return strings.HasPrefix(name, base+k.infix()) }

// Created parses the stamp of name, a directory of kind k beside the
// directory whose base name is base; ok is false when name is not one or
// its stamp does not parse.
func (k Kind) Created(base, name string) (t time.Time, ok bool) {
	rest, ok := strings.CutPrefix(name, base+k.infix())
	if !ok {
		return time.Time{}, false
	}
	stamp, _, _ := strings.Cut(rest, "-")
	t, err := time.Parse(StampLayout, stamp)
	return t, err == nil
}

// LeftByRestore reports whether name (a base name in the parent of the
// directory whose base name is base) is something a restore leaves beside
// it: staging, a pre-restore copy or the journal. Backups never archive
// these.
func LeftByRestore(base, name string) bool {
	return Staging.Of(base, name) || PreRestore.Of(base, name) || name == filepath.Base(Journal(base))
}

// StampLayout is the time layout of <stamp>, always UTC.
const StampLayout = "20060102T150405Z"

// Stamp returns t in UTC as a <stamp>.
func Stamp(t time.Time) string { return t.UTC().Format(StampLayout) }
