package backup

import (
	"errors"
	"fmt"

	"github.com/hermesbox/hbx/internal/supervisorwatch"
)

// Errors returned (wrapped) by this package. Use errors.Is. Unsafe entries
// (names that climb above the root, entries beneath a symlink) wrap
// extract.ErrUnsafePath; hardlinks to nowhere wrap extract.ErrBadLink.
var (
	// ErrNoPassphrase: the archive is encrypted (or encryption is asked
	// for) and no passphrase was given, or the one given is empty.
	ErrNoPassphrase = errors.New("no passphrase")
	// ErrPassphraseFile: the passphrase file is missing, unreadable, not a
	// regular file, readable or writable by group or others, or starts
	// with an empty line (see ReadPassphraseFile); the CLI maps it to
	// invalid configuration.
	ErrPassphraseFile = errors.New("bad passphrase file")
	// ErrWrongPassphrase: the passphrase does not decrypt the archive,
	// whose bytes are known to be intact (they match the .sha256 file
	// or the sha256 in the .json file beside it).
	ErrWrongPassphrase = errors.New("wrong passphrase")
	// ErrUndecryptable: the passphrase does not decrypt the archive and
	// nothing tells whether it is wrong or the archive's key packets are
	// damaged (no well-formed .sha256 or .json file beside it; the
	// OpenPGP format cannot tell the two apart).
	ErrUndecryptable = errors.New("wrong passphrase or damaged archive")
	// ErrNotProtected: an OpenPGP message without integrity protection
	// (a Symmetrically Encrypted Data packet without MDC), or one that is
	// not encrypted at all. Such archives are never read.
	ErrNotProtected = errors.New("archive is not integrity-protected")
	// ErrCorrupt: the archive is truncated, fails its integrity check
	// (OpenPGP MDC or AEAD tag, gzip CRC, zstd checksum, its .sha256 file),
	// is not a tar stream, or its manifest does not parse. A passphrase
	// that does not decrypt an archive whose bytes differ from its .sha256
	// file is reported as ErrCorrupt, not as a wrong passphrase.
	ErrCorrupt = errors.New("archive is damaged")
	// ErrMismatch: an entry differs from what the manifest lists (content,
	// size, type, mode or link), an entry is not listed, listed twice, or a
	// listed entry is missing from the archive.
	ErrMismatch = errors.New("archive does not match its manifest")
	// ErrBusy: a process other than the supervisor's programs holds files in
	// a directory to be archived or replaced (see IsBusy).
	ErrBusy = errors.New("directory in use")
	// ErrNoSpace: the destination's filesystem cannot hold the result.
	ErrNoSpace = errors.New("not enough free space")
	// ErrNotStopped: the supervisor did not stop every program for the hold.
	ErrNotStopped = errors.New("services did not stop")
	// ErrUnhealthy: after a restore the services did not become healthy in
	// time; the restore was undone.
	ErrUnhealthy = errors.New("services did not become healthy")
	// ErrNotRestarted: the programs a backup or restore stopped were not
	// confirmed running again (the supervisor is gone, a program is FATAL,
	// or they did not become RUNNING and healthy in time).
	ErrNotRestarted = errors.New("programs not running again")
	// ErrSupervisorGone: the connection to the supervisor broke while a
	// backup or restore depended on it (Watcher): it died (processes of
	// its programs may live on until the next hbx supervise stops them)
	// or shut down.
	ErrSupervisorGone = supervisorwatch.ErrGone
	// ErrRestoreHalfDone: the recovery of an interrupted restore put the
	// data back but could not switch the runtime back (RecoverOptions
	// without a Runtime); the journal is kept for a recovery that can.
	ErrRestoreHalfDone = errors.New("interrupted restore only partly undone")
	// ErrInvalid: bad options (relative paths, overlapping directories, an
	// unknown compression); the CLI maps it to a usage error.
	ErrInvalid = errors.New("invalid backup options")
	// ErrImageRefused: a restore would bring back a runtime the box may
	// not run (another repository than executor.image's and its mirrors),
	// or an archive that is not authenticated (not encrypted with the
	// box's passphrase) would change the runtime or extra paths
	// (PlanRestore). Nothing changed.
	ErrImageRefused = errors.New("archive refused")
	// ErrRuntimeUnavailable is wrapped by a Runtime's Install error when
	// the image could not be had at all (no network, the registry down or
	// without it, no local image), as opposed to one that was had and
	// failed a check (a digest mismatch, a bad configuration). Only this
	// failure lets Restore put the data back without its runtime
	// (RestoreOptions.WithoutRuntime).
	ErrRuntimeUnavailable = errors.New("the runtime could not be fetched")
	// ErrRuntimeAwaited: a restore put the data back without its runtime
	// (journal phase "restored, not started") and that runtime is still
	// not the active release; nothing may start on the data until it is.
	ErrRuntimeAwaited = errors.New("the restored data awaits its runtime")
)

// entryError names the archive entry an error is about.
type entryError struct {
	path string
	err  error
}

func (e *entryError) Error() string { return fmt.Sprintf("entry %q: %v", e.path, e.err) }

// Unwrap returns the cause.
func (e *entryError) Unwrap() error { return e.err }

// BadEntry returns the archive path of the first entry err is about, or
// false when err names none.
func BadEntry(err error) (string, bool) {
	var e *entryError
	if errors.As(err, &e) {
		return e.path, true
	}
	return "", false
}

// busyError names a process that holds a file in a guarded directory.
type busyError struct {
	pid     int
	command string
	path    string
}

func (e *busyError) Error() string {
	return fmt.Sprintf("%v: pid %d (%s) holds %s; stop it, or run hbx supervise so backup can stop the services", ErrBusy, e.pid, e.command, e.path)
}

// Unwrap returns ErrBusy.
func (e *busyError) Unwrap() error { return ErrBusy }

// IsBusy reports whether err says a process holds files in a guarded
// directory, and returns that process's pid and the path it holds.
func IsBusy(err error) (pid int, path string, ok bool) {
	var e *busyError
	if errors.As(err, &e) {
		return e.pid, e.path, true
	}
	return 0, "", false
}
