package backup

import (
	"context"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/supervisorwatch"
)

// Services stops and starts again the supervised programs around a backup
// or a restore. Supervised implements it over the supervisor's client; a nil
// Services means no supervisor runs, and then nothing may hold files in the
// archived directories (see IsBusy).
type Services interface {
	// Hold stops every supervised program, in reverse priority order, and
	// returns once all are STOPPED (error wrapping ErrNotStopped
	// otherwise). They stay stopped until Release, or until this process
	// dies: the supervisor then starts them again. A nil Hold with a nil
	// error means the caller already holds them (the pre-upgrade backup):
	// nothing to release or to wait for.
	Hold(ctx context.Context) (Hold, error)
	// WaitHealthy starts every program that should run (autostart) and is
	// not running (a released hold starts only those it stopped), then
	// returns nil once Executor's /api/health answers 200 and every such
	// program is RUNNING; an error when ctx ends first or a program is
	// FATAL.
	WaitHealthy(ctx context.Context) error
	// WaitRunning starts nothing: it returns nil once every program in
	// names is RUNNING and, when names holds Executor, its /api/health
	// answers 200; an error saying which program is in which state when
	// ctx ends first, a program is FATAL, or the supervisor no longer
	// answers. Create calls it after releasing its hold, with the programs
	// the hold stopped.
	WaitRunning(ctx context.Context, names []string) error
}

// Watcher is implemented by Services that notice at once when the
// supervisor goes away: Gone is closed when a connection to it (a hold, or
// a watch kept open for the whole operation) breaks without being
// released: it died, and the programs it ran with it, or it shut down.
// Create and Restore stop then instead of waiting on a supervisor that
// cannot answer: a backup stops writing and removes its partial archive
// (nothing keeps the data cold any more); a restore stops before its swap,
// or after it puts the old data back without a supervisor (checking that
// no process holds files in the data directory). Neither waits for the
// programs to run again, and the error wraps ErrSupervisorGone.
type Watcher = supervisorwatch.Watcher

// supervisorGone reports whether svc is a Watcher whose supervisor is gone.
func supervisorGone(svc Services) bool { return supervisorwatch.IsGone(svc) }

// untilGone returns ctx cancelled with ErrSupervisorGone as its cause
// once svc's supervisor is gone; cancel releases it.
func untilGone(ctx context.Context, svc Services) (context.Context, context.CancelFunc) {
	return supervisorwatch.Until(ctx, svc)
}

// Hold is a set of programs kept stopped; see Services.Hold.
type Hold interface {
	// Running names the programs that were running (or starting) when the
	// hold began, in priority order: those Release starts again.
	Running() []string
	// Release ends the hold; the supervisor starts Running() again. It does
	// not wait for them, and a nil error does not mean they run (the
	// supervisor may be gone): Services.WaitRunning confirms it.
	Release() error
}

// Runtime installs the Executor runtime a restored archive was written by.
// The composer implements it with the installer.
type Runtime interface {
	// Install makes the release of image (name:tag@sha256:..., "" for the
	// configured image) the active one; manifest, when not "", pins the
	// child manifest of platform. It reports whether the active release
	// changed. ctx carries the lock the caller holds (lock.WithHeld).
	Install(ctx context.Context, image, platform string, manifest digest.Digest) (changed bool, err error)
}

// Config is the config file's pin of the release: executor.image and the
// configured platform's manifest digest in executor.platform_digests,
// which the supervisor checks the active release against each time it
// starts Executor. A restore of an archive written by another release
// pins that release there, as `hbx upgrade` does. The composer implements it
// over the --config file.
type Config interface {
	// Pinned returns the image and the platform's manifest digest the
	// configuration names now ("" when the platform is not pinned).
	Pinned() (image string, manifest digest.Digest, err error)
	// CanPin returns nil when Pin takes effect: an error naming the reason
	// when there is no config file, or when an HBX_* variable or a flag
	// overrides the pin.
	CanPin() error
	// Pin writes image and manifest into the config file atomically,
	// keeping its other content; manifest "" removes the platform's pin.
	Pin(image string, manifest digest.Digest) error
}

// EventKind names a step of a backup or restore, in the order they happen.
type EventKind string

// The events Create and Restore report (Progress).
const (
	EventLocked    EventKind = "locked"    // the runtime directory's lock is held
	EventStopped   EventKind = "stopped"   // the services are stopped (or none ran)
	EventScanned   EventKind = "scanned"   // every file is hashed; Files, Bytes
	EventWritten   EventKind = "written"   // the archive is durable under its final name
	EventStarted   EventKind = "started"   // the services were started again
	EventVerified  EventKind = "verified"  // the archive was read back and matches
	EventExtracted EventKind = "extracted" // restore: the archive is verified into staging
	EventRuntime   EventKind = "runtime"   // restore: the archive's runtime is active
	EventPinned    EventKind = "pinned"    // restore: the config file pins the archive's release
	EventSwapped   EventKind = "swapped"   // restore: the directories are exchanged
	EventHealthy   EventKind = "healthy"   // restore: the services answer
	EventCommitted EventKind = "committed" // restore: done, old data kept aside
	EventUndone    EventKind = "undone"    // restore: the old data is back
	// EventNotStarted: restore: the data is back without its runtime,
	// nothing started (Detail: the image it waits for).
	EventNotStarted EventKind = "not-started"
)

// Event is one progress report. Files and Bytes count what was handled so
// far (regular file content bytes).
type Event struct {
	Kind   EventKind `json:"event"`
	Path   string    `json:"path,omitempty"`
	Files  int       `json:"files,omitempty"`
	Bytes  int64     `json:"bytes,omitempty"`
	Detail string    `json:"detail,omitempty"`
}

// Progress receives events. nil options fields mean none.
type Progress interface {
	Event(Event)
}

type nopProgress struct{}

func (nopProgress) Event(Event) {}
