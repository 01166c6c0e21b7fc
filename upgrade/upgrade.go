package upgrade

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/supervisorwatch"
	"github.com/hermesbox/hbx/release"
)

// LockFile is the runtime directory's lock, the one install, backup and
// restore take.
const LockFile = release.LockFile

// NotRehearsed is the note of an Upgrade without Options.Rehearse (hbx
// upgrade --no-rehearsal): the release met the live data untried.
const NotRehearsed = "not rehearsed on a copy of the data (--no-rehearsal)"

var (
	// ErrSameRelease: the target is already the active release.
	ErrSameRelease = errors.New("already the active release")
	// ErrNoSupervisor: no supervisor runs, so nothing could be stopped or
	// health-checked.
	ErrNoSupervisor = errors.New("no supervisor is running (start hbx supervise first)")
	// ErrRolledBack: the upgrade failed after activation and was rolled
	// back; the error also wraps the cause. Its text follows the
	// command's ("upgrade: rolled back to ...").
	ErrRolledBack = errors.New("rolled back")
	// ErrNoUpgrade: there is no completed upgrade to roll back.
	ErrNoUpgrade = errors.New("no upgrade to roll back")
	// ErrMismatch: the pre-upgrade archive or the releases on disk do not
	// match the journal.
	ErrMismatch = errors.New("does not match the recorded upgrade")
	// ErrInvalid: bad options.
	ErrInvalid = errors.New("invalid upgrade options")
	// ErrSupervisorGone: the connection to the supervisor broke during the
	// change (Watcher): it died, and its programs with it, or shut down.
	ErrSupervisorGone = supervisorwatch.ErrGone
)

// Runtime is the installer: releases in the runtime directory.
type Runtime interface {
	// Active and Previous read the releases current and previous name.
	Active() (Release, error)
	Previous() (Release, error)
	// Stage publishes the release of image (pinned to manifest pin when
	// not "") without activating it, and says what it downloaded and
	// reused. ctx carries the held lock.
	Stage(ctx context.Context, image string, pin digest.Digest) (Release, Transfer, error)
	// Activate makes the published release of manifest the active one
	// (previous := the old current). ctx carries the held lock.
	Activate(ctx context.Context, manifest digest.Digest) error
	// SetPrevious points previous at the published release of manifest,
	// current untouched, or removes previous when manifest is "" or that
	// release is no longer on disk (found false). ctx carries the held
	// lock.
	SetPrevious(ctx context.Context, manifest digest.Digest) (found bool, err error)
}

// Hold keeps the services stopped until Release.
type Hold interface{ Release() error }

// Services is the supervisor with the health checks.
type Services interface {
	// Hold stops every program and keeps them stopped until Release or
	// until this process dies.
	Hold(ctx context.Context) (Hold, error)
	// WaitHealthy starts the programs that should run and returns nil
	// once they run and the health checks pass for r, or an error saying
	// which fail when ctx ends first.
	WaitHealthy(ctx context.Context, r Release) error
}

// Watcher is implemented by Services that notice at once when the
// supervisor goes away: Gone is closed when a connection to it (the hold,
// or a watch kept open for the whole change) breaks without being
// released. Upgrade and Switch then stop waiting: before activation the
// change is abandoned (the old release stays active and configured);
// during the health wait it is rolled back at once, without a supervisor.
// The error wraps ErrSupervisorGone.
type Watcher = supervisorwatch.Watcher

// isGone reports whether svc's supervisor is gone.
func isGone(svc Services) bool { return supervisorwatch.IsGone(svc) }

// untilGone returns ctx cancelled with ErrSupervisorGone as its cause once
// svc's supervisor is gone.
func untilGone(ctx context.Context, svc Services) (context.Context, context.CancelFunc) {
	return supervisorwatch.Until(ctx, svc)
}

// Data is backup and restore of the data directory.
type Data interface {
	// Backup writes a cold archive of the data, recording r as its
	// runtime, while the services are already held; it returns the
	// archive's path. spare, when not "", is an archive the backup's
	// pruning (backup.keep) must leave: the pre-upgrade archive of the
	// completed change before this one (Journal.Prior), which hbx
	// rollback restores when this one fails.
	Backup(ctx context.Context, r Release, spare string) (string, error)
	// Recorded returns the index and manifest digests archive records
	// (its summary file), or an error when it is missing or has no
	// summary.
	Recorded(archive string) (index, manifest digest.Digest, err error)
	// Restore replaces the data with archive's and makes r the active
	// release (reactivated in place when current or previous holds it,
	// installed with r pinned otherwise), stopping the services, unless
	// none run, then starting them and waiting for health. It returns
	// where the replaced trees are kept (Kept).
	Restore(ctx context.Context, archive string, r Release) (Kept, error)
}

// Kept is where a rollback's restore moved the trees it replaced: each a
// <dir>.rolled-back-<time> copy (datadir.RolledBack) the restore's swap
// moved it to, never a pre-restore copy a later restore prunes.
type Kept struct {
	// Data is the data directory's copy ("" when there was none).
	Data string
	// Extra maps each extra backup.paths directory the restore replaced
	// to its copy.
	Extra map[string]string
}

// Config pins a release in the config file hbx was started with.
type Config interface {
	// Pin writes r's image and manifest digest, and its tool set unless
	// r.MCPTools is nil, in one write; it returns a note when nothing
	// could be written (no config file), "" otherwise.
	Pin(r Release) (string, error)
}

// Options are the parts an upgrade or rollback works with.
type Options struct {
	RuntimeDir string // absolute; holds the lock and the journal
	DataDir    string // absolute; where rolled-back data is kept aside beside
	// KeepRolledBack is how many <DataDir>.rolled-back-<time> copies a
	// rollback leaves, its own included, newest first
	// (backup.keep_pre_restore); at least 1: the newest copy holds data no
	// archive holds, and is never removed.
	KeepRolledBack int
	LockWait       time.Duration
	HealthWait     time.Duration // bound on the wait for health after a switch

	Runtime  Runtime
	Services Services // nil: no supervisor runs (Recover only)
	Data     Data
	Config   Config

	// Rehearse, when not nil, boots the staged release on a copy of the
	// data before an Upgrade or a Switch stops anything (package
	// rehearse, composed by the caller) and returns a line for
	// Result.Notes (nil: an Upgrade's Result.Notes say NotRehearsed); its
	// error refuses the change before anything is stopped or journaled,
	// the old release active (and, for an Upgrade, configured).
	Rehearse func(ctx context.Context, r Release) (string, error)

	Logger *slog.Logger
	// Step, if not nil, is told each step as it starts ("staging",
	// "rehearsing", "stopping", "backing-up", "activating", "health", "done",
	// "rolling-back", "rolled-back"); "activating" and "rolling-back"
	// come once their journal phase is durable.
	Step func(step string)
	Now  func() time.Time
}

// Target is the release to upgrade to: a release.Target (Image, validated
// by the caller; IndexDigest, the reference's digest; ManifestDigest, the
// platform's manifest, "" when not pinned; Platform is not used: the
// runtime stages the configured one) and the tool sets to pin with it.
type Target struct {
	release.Target
	// MCPTools is the tool set to pin with the new release; nil keeps
	// Current's.
	MCPTools *Tools
	// Current is the tool set the config file pins now, recorded with the
	// old release so a rollback puts it back; nil when not known (the
	// config file's tool set is then left as it is).
	Current *Tools
}

// Transfer is what staging a release moved: the layer blobs it
// downloaded and those it found in the blob store, with their compressed
// sizes in bytes (the manifests' sizes). The index, manifest and config, a
// few KiB, are not counted. Zero when the release was already on disk.
type Transfer struct {
	Fetched, Reused           int
	FetchedBytes, ReusedBytes int64
	// Location is the repository the image was fetched from (its own
	// name or the registry.mirrors location that answered); "" when
	// nothing came from a registry.
	Location string
}

// Result says what an upgrade or rollback did.
type Result struct {
	Old, New  Release  // for a rollback: Old is what was active, New what is now
	Transfer  Transfer // what staging New downloaded and reused (upgrade only)
	Backup    string   // the pre-upgrade archive
	KeptAside string   // rollback: where the replaced data is
	Notes     []string
	Recovered string // an interrupted upgrade handled first
	// Interrupted (Rollback only): the change to roll back was an
	// interrupted one, which the recovery (Recovered) already undid;
	// nothing more was rolled back.
	Interrupted bool
	Duration    time.Duration
}

func (o *Options) defaults() error {
	if !filepath.IsAbs(o.RuntimeDir) || !filepath.IsAbs(o.DataDir) {
		return fmt.Errorf("%w: runtime and data directories must be absolute", ErrInvalid)
	}
	if o.Runtime == nil || o.Data == nil || o.Config == nil {
		return fmt.Errorf("%w: runtime, data and config are required", ErrInvalid)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Step == nil {
		o.Step = func(string) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HealthWait <= 0 {
		o.HealthWait = 2 * time.Minute
	}
	return nil
}

func (o *Options) lock(ctx context.Context, command string) (context.Context, *lock.Lock, error) {
	lk, err := release.LockRuntime(ctx, o.RuntimeDir, command, o.LockWait, o.Logger)
	if err != nil {
		return nil, nil, err
	}
	return lock.WithHeld(ctx, lk), lk, nil
}

// Upgrade moves the box to t; see the package doc for the steps.
func Upgrade(ctx context.Context, opts Options, t Target) (res *Result, err error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if opts.Services == nil {
		return nil, ErrNoSupervisor
	}
	return change(ctx, opts, t, "", true)
}

// Switch changes the active release to t while Executor does not run
// (the caller made sure: `hbx install` under existing data): the steps
// of Upgrade, the rehearsal included when Options.Rehearse is set,
// recorded in the journal the same way (by "hbx install"), so Rollback
// can undo it, but without the health wait, since nothing ran. Services
// may be nil (no supervisor); when set, every program is held stopped
// across the backup and the activation.
func Switch(ctx context.Context, opts Options, t Target) (*Result, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	return change(ctx, opts, t, ByInstall, false)
}
