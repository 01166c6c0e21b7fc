package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/release"

	digest "github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/atomicfile"
	journalfile "github.com/hermesbox/hbx/internal/journal"
	"github.com/hermesbox/hbx/internal/lock"
)

// Journal phases.
const (
	// phaseStaging: staging directories are being filled; nothing live
	// changed, unless Runtime is set: then the services were stopped and
	// the runtime may have been switched to the archive's. Recovery puts
	// the runtime back and removes the staging.
	phaseStaging = "staging"
	// phaseSwapping: the swaps may have happened, in Roots order, and the
	// services may have run on the restored data; its health is not
	// confirmed. Recovery undoes every swap that happened.
	phaseSwapping = "swapping"
	// phaseCommitted: the restore is confirmed. Recovery prunes old
	// pre-restore copies and removes the journal.
	phaseCommitted = "committed"
	// phaseNotStarted ("restored, not started"): the data is swapped in
	// and the config file pins the archive's release, but its runtime
	// could not be installed (ErrRuntimeUnavailable), so nothing was
	// started on it; Awaiting names that runtime. Recovery never undoes
	// it: once the archive's release is active (or, with
	// RecoverOptions.InstallAwaited, after installing it) it finishes it
	// like a confirmed one; until then it leaves it (AwaitedRuntime).
	phaseNotStarted = "not-started"
)

// journal records an unfinished restore, written durably beside the data
// directory before each step that changes what is on disk. Recovery reads
// the phase and, for each root, looks at which tree the live path holds
// (by device and inode), so a crash between a journal write and a rename
// is recovered too.
type journal struct {
	Format  int           `json:"format"`
	Phase   string        `json:"phase"`
	Started time.Time     `json:"started"`
	PID     int           `json:"pid"`
	Archive string        `json:"archive"`
	Keep    int           `json:"keep_pre_restore"`
	Roots   []journalRoot `json:"roots"`
	// Runtime is set before an install that may switch the active release,
	// so an undo can switch back.
	Runtime *journalRuntime `json:"runtime,omitempty"`
	// Awaiting is the archive's release, set with phaseNotStarted.
	Awaiting *journalAwait `json:"awaiting,omitempty"`
	// Prior is the "restored, not started" journal this restore began
	// over: its data is this restore's old tree and its pin the one this
	// restore's undo puts back, so when this restore ends without taking
	// effect (undone, or failed before the swap) Prior becomes the journal
	// again (endJournal) and its data keeps waiting for its runtime.
	// Cleared when this restore takes effect (committed or not started).
	Prior *journal `json:"prior,omitempty"`
}

// journalAwait is the release restored data waits for: the archive's
// image (name:tag@sha256:index), its platform and child manifest digest.
type journalAwait struct {
	// Target is the awaited release (its JSON fields image,
	// index_digest, platform, manifest_digest).
	release.Target
	// Configured: the archive names no release (a plain tar), so this is
	// the configured one it was restored for, not one that wrote it.
	Configured bool `json:"configured,omitempty"`
}

// journalRoot is one restored directory.
type journalRoot struct {
	Target    string `json:"target"`  // the live directory
	Staging   string `json:"staging"` // where the archive is extracted
	Old       string `json:"old"`     // where the live tree goes after the swap
	Existed   bool   `json:"existed"` // Target existed before the restore
	TargetID  fileID `json:"target_id"`
	StagingID fileID `json:"staging_id"`
}

// journalRuntime is what a restore changes besides the data: the active
// release and the config file's pin. It is written before either changes,
// so recovery undoes whatever a crash left switched, whichever step it
// reached.
type journalRuntime struct {
	// Changed is set once the install returned: it switched the release.
	// Undo does not rely on it: it compares the active release with the
	// prior one.
	Changed       bool          `json:"changed"`
	PriorImage    string        `json:"prior_image,omitempty"`
	PriorPlatform string        `json:"prior_platform,omitempty"`
	PriorManifest digest.Digest `json:"prior_manifest,omitempty"`
	// Pin is set when the restore pins the archive's release in the config
	// file.
	Pin *journalPin `json:"pin,omitempty"`
}

// journalPin is the config file's pin before a restore and the image the
// restore pins.
type journalPin struct {
	PriorImage    string        `json:"prior_image"`
	PriorManifest digest.Digest `json:"prior_manifest,omitempty"`
	Image         string        `json:"image"`
}

// MarshalJSON and UnmarshalJSON keep fileID readable in the journal.
func (id fileID) MarshalJSON() ([]byte, error) {
	return json.Marshal([2]uint64{id.dev, id.ino})
}

func (id *fileID) UnmarshalJSON(b []byte) error {
	var v [2]uint64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	id.dev, id.ino = v[0], v[1]
	return nil
}

// journalFormat is the journal version this hbx writes and reads.
const journalFormat = 1

// journalPath is the journal of the data directory dataDir.
func journalPath(dataDir string) string { return datadir.Journal(dataDir) }

// journalFile is the restore journal of dataDir (internal/journal).
func journalFile(dataDir string) journalfile.File {
	return journalfile.File{Path: journalPath(dataDir), What: "restore journal", Format: journalFormat,
		Fix: "move it away once the data directory is checked by hand"}
}

// SetFormat sets the format the journal records (journalfile.Versioned).
func (j *journal) SetFormat(n int) { j.Format = n }

// write records j durably.
func (j *journal) write(dataDir string) error { return journalFile(dataDir).Write(j) }

// readJournal reads the restore journal of dataDir; nil, nil when there
// is none. One of another format is refused (journalfile.ErrFormat).
func readJournal(dataDir string) (*journal, error) {
	var j journal
	ok, err := journalFile(dataDir).Read(&j)
	if err != nil || !ok {
		return nil, err
	}
	return &j, nil
}

// endJournal ends the journal j of a restore that did not take effect
// (undone, or failed before its swap): the "restored, not started"
// journal it began over (j.Prior) is written back, so its data still
// waits for its runtime; without one the journal is removed.
func endJournal(dataDir string, j *journal) error {
	if j != nil && j.Prior != nil {
		if err := j.Prior.write(dataDir); err != nil {
			return fmt.Errorf("put back the journal of the restore of %s, not started: %w", j.Prior.Archive, err)
		}
		return nil
	}
	return removeJournal(dataDir)
}

func removeJournal(dataDir string) error {
	if err := os.Remove(journalPath(dataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove restore journal: %w", err)
	}
	return atomicfile.SyncDir(filepath.Dir(dataDir))
}

// PendingRestore is a restore journal found beside a data directory: a
// restore that is running, or whose command died before it finished.
type PendingRestore struct {
	Journal string    // <data_dir>.restore.json
	Archive string    // the archive being restored
	Phase   string    // staging, swapping or committed
	Started time.Time // when the restore began
	PID     int       // the process that started it
	// Awaiting is the archive's image (name:tag@sha256:...) when NotStarted.
	Awaiting string
}

// Unfinished reports whether the restore may have changed what is live
// without being confirmed healthy (phase staging or swapping): Recover
// undoes it. A committed one only has old copies left to prune; one
// restored without its runtime (NotStarted) is never undone.
func (p *PendingRestore) Unfinished() bool {
	return p.Phase != phaseCommitted && p.Phase != phaseNotStarted
}

// NotStarted reports whether the restore put the data back without its
// runtime ("restored, not started"): Awaiting names the release the data
// waits for.
func (p *PendingRestore) NotStarted() bool { return p.Phase == phaseNotStarted }

// ReadPendingRestore reads the restore journal of dataDir; nil, nil when
// there is none. The error says when it cannot be read or parsed.
func ReadPendingRestore(dataDir string) (*PendingRestore, error) {
	j, err := readJournal(dataDir)
	if err != nil || j == nil {
		return nil, err
	}
	p := &PendingRestore{Journal: journalPath(dataDir), Archive: j.Archive, Phase: j.Phase, Started: j.Started, PID: j.PID}
	if j.Awaiting != nil {
		p.Awaiting = j.Awaiting.Image
	}
	return p, nil
}

// RecoverOptions say where to look for an interrupted restore.
type RecoverOptions struct {
	DataDir    string   // executor.data_dir; its journal is <DataDir>.restore.json
	RuntimeDir string   // holds the lock
	Services   Services // stops the programs before an undo; nil: none run
	Runtime    Runtime  // switches back a runtime the restore installed; nil skips
	Config     Config   // puts back the pin the restore wrote; nil skips
	// InstallAwaited installs, through Runtime, the release data restored
	// without its runtime waits for (executor.install_on_start), so the
	// restore finishes; without it such a restore is left as it is until
	// that release is active (AwaitedRuntime says so).
	InstallAwaited bool
	Logger         *slog.Logger
}

// Recover finishes or undoes a restore that was interrupted (killed, or the
// machine went down): one that was not confirmed healthy is undone (the
// config file's pin it wrote is put back, the data from before it is put
// back, the runtime it switched to is switched back, its staging is
// removed); a confirmed one is finished (old pre-restore copies pruned).
// It returns what it did, in words, "" when there was nothing to do. While
// another process holds the lock (a restore still running), it does
// nothing. `hbx supervise` calls it before starting programs; Create and
// Restore call it under their own lock.
func Recover(ctx context.Context, opts RecoverOptions) (string, error) {
	if _, err := os.Lstat(journalPath(opts.DataDir)); errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	log, _, _ := defaults(opts.Logger, nil, nil)
	lk, err := acquire(ctx, opts.RuntimeDir, "hbx recover", 0, log)
	if lock.IsLocked(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer lk.Unlock()
	return recoverLocked(lock.WithHeld(ctx, lk), recoverOptions{dataDir: opts.DataDir, runtimeDir: opts.RuntimeDir, services: opts.Services, runtime: opts.Runtime, config: opts.Config, log: log, installAwaited: opts.InstallAwaited})
}

// recoverOptions are Recover's inputs once the lock is held.
type recoverOptions struct {
	dataDir    string
	runtimeDir string // finishes a restore whose awaited release is active here
	// installAwaited installs the release a restore without its runtime
	// waits for (RecoverOptions.InstallAwaited).
	installAwaited bool
	paths          []string
	services       Services
	runtime        Runtime
	config         Config
	log            *slog.Logger
	held           bool // the services are already held (or checked idle)
	// releaseBack, when set, is told whether the recovery put back the
	// config file's pin or the runtime (a supervisor may have left
	// Executor FATAL on the mismatch meanwhile).
	releaseBack *bool
}

// recoverLocked finishes or undoes the restore o's journal records, under
// the lock; see Recover.
func recoverLocked(ctx context.Context, o recoverOptions) (string, error) {
	j, err := readJournal(o.dataDir)
	if err != nil || j == nil {
		return "", err
	}
	switch {
	case j.Phase == phaseStaging && j.Runtime == nil:
		// Window "restore, staging": nothing live changed.
		return removeStaged(o, j)
	case j.Phase == phaseStaging, j.Phase == phaseSwapping:
		// Windows "release change recorded", "swapped, before the pin",
		// "swapped, not confirmed": undo.
		return undoInterrupted(ctx, o, j)
	case j.Phase == phaseNotStarted:
		// "Restored, not started": never undone; finished once its
		// runtime is active.
		return resumeNotStarted(ctx, o, j)
	case j.Phase == phaseCommitted:
		// Window "restore, confirmed": finish.
		return finishCommitted(o, j)
	}
	return "", fmt.Errorf("restore journal %s has unknown phase %q; check the data directory by hand", journalPath(o.dataDir), j.Phase)
}

// removeStaged removes the staging trees and the journal of a restore
// that changed nothing live: no service needs stopping.
func removeStaged(o recoverOptions, j *journal) (string, error) {
	for _, r := range j.Roots {
		if err := datadir.RemoveTree(r.Staging); err != nil {
			return "", err
		}
	}
	if err := endJournal(o.dataDir, j); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("removed the staging of an interrupted restore of %s (started %s); nothing had changed", j.Archive, j.Started.Format(time.RFC3339))
	o.log.Warn(msg)
	return msg, nil
}

// undoInterrupted stops the services (unless held), puts back the pin,
// the data and the runtime from before the restore, starts them again and
// removes the journal, which is kept when the undo is not complete.
func undoInterrupted(ctx context.Context, o recoverOptions, j *journal) (string, error) {
	var hold Hold
	if !o.held {
		var err error
		if hold, err = stopServices(ctx, o.services, targets(j), 0, o.log); err != nil {
			return "", fmt.Errorf("undo interrupted restore: %w", err)
		}
	}
	did, rel, uerr := undo(ctx, j, o.runtime, o.config, o.log)
	if hold != nil {
		if rerr := hold.Release(); uerr == nil && rerr != nil {
			uerr = fmt.Errorf("start services again: %w", rerr)
		}
	}
	if errors.Is(uerr, ErrRestoreHalfDone) {
		return "", fmt.Errorf("undo interrupted restore of %s: %w; the journal %s is kept: run `hbx backup` or restart `hbx supervise`, which finish undoing it", j.Archive, uerr, journalPath(o.dataDir))
	}
	if uerr != nil {
		return "", fmt.Errorf("undo interrupted restore of %s: %w", j.Archive, uerr)
	}
	if err := endJournal(o.dataDir, j); err != nil {
		return "", err
	}
	if o.releaseBack != nil {
		*o.releaseBack = rel
	}
	what := "nothing had changed"
	if len(did) > 0 {
		what = strings.Join(did, "; ")
	}
	msg := fmt.Sprintf("undid an interrupted restore of %s (started %s): %s", j.Archive, j.Started.Format(time.RFC3339), what)
	o.log.Warn(msg)
	return msg, nil
}

// finishCommitted prunes old pre-restore copies of a confirmed restore
// and removes its journal.
func finishCommitted(o recoverOptions, j *journal) (string, error) {
	for _, r := range j.Roots {
		if _, err := datadir.Prune(r.Target, datadir.PreRestore, j.Keep); err != nil {
			o.log.Warn("prune pre-restore copies", "err", err)
		}
	}
	if err := removeJournal(o.dataDir); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("finished the restore of %s", j.Archive)
	o.log.Info(msg)
	return msg, nil
}

func targets(j *journal) []string {
	var out []string
	for _, r := range j.Roots {
		out = append(out, r.Target)
	}
	return resolvedDirs(out)
}

// undo puts back what the restore changed, whatever step it reached, in
// the reverse order of the restore: the config file's pin (so the
// supervisor refuses to start Executor until the runtime matches again),
// then every root, then the runtime. It returns what it changed, in words,
// and whether that included the pin or the runtime. Each step is
// idempotent, so an undo killed half-way is done again.
func undo(ctx context.Context, j *journal, rt Runtime, cfg Config, log *slog.Logger) (did []string, release bool, err error) {
	jr := j.Runtime
	if jr != nil && jr.Pin != nil {
		p := jr.Pin
		switch {
		case cfg == nil:
			log.Warn("the restore pinned a release in the config file; nothing here can put the pin back", "image", p.Image, "prior_image", p.PriorImage)
		default:
			img, man, err := cfg.Pinned()
			if err != nil {
				return did, release, fmt.Errorf("read the config file's pin: %w", err)
			}
			if img != p.PriorImage || man != p.PriorManifest {
				if err := cfg.Pin(p.PriorImage, p.PriorManifest); err != nil {
					return did, release, fmt.Errorf("pin %s in the config file again: %w", p.PriorImage, err)
				}
				did, release = append(did, fmt.Sprintf("the config file pins %s again", p.PriorImage)), true
			}
		}
	}
	for i := len(j.Roots) - 1; i >= 0; i-- {
		back, rerr := undoRoot(j.Roots[i], log)
		if rerr != nil {
			return did, release, rerr
		}
		if back {
			did = append(did, fmt.Sprintf("the data from before it is back in %s", j.Roots[i].Target))
		}
	}
	if jr != nil && jr.PriorImage != "" {
		if rt == nil {
			// The data is back but the runtime may still be the archive's:
			// the journal stays, so a recovery that can switch the runtime
			// (hbx supervise, hbx backup) finishes the undo. hbx install
			// would not: it follows the pin, not the data.
			return did, release, fmt.Errorf("%w: the runtime may still be the archive's and nothing here can switch it back to %s", ErrRestoreHalfDone, jr.PriorImage)
		}
		changed, err := rt.Install(ctx, jr.PriorImage, jr.PriorPlatform, jr.PriorManifest)
		if err != nil {
			return did, release, fmt.Errorf("re-activate the runtime active before (%s): %w", jr.PriorImage, err)
		}
		if changed {
			did, release = append(did, fmt.Sprintf("the runtime active before it (%s) is active again", jr.PriorImage)), true
		}
	}
	return did, release, nil
}

// undoRoot makes r.Target hold the tree it held before the restore and
// removes the restored tree. It reports whether it swapped a restored
// tree back out.
func undoRoot(r journalRoot, log *slog.Logger) (bool, error) {
	cur, exists, err := statID(r.Target)
	if err != nil {
		return false, err
	}
	switch {
	case exists && cur == r.StagingID && r.StagingID != (fileID{}):
		// Swapped: the old tree is at Staging or Old (or gone, if there was none).
		if !r.Existed {
			if err := renameNoReplace(r.Target, r.Staging); err != nil {
				return false, fmt.Errorf("move restored %s aside: %w", r.Target, err)
			}
			log.Info("restore undone", "target", r.Target)
			return true, datadir.RemoveTree(r.Staging)
		}
		oldAt := ""
		for _, p := range []string{r.Staging, r.Old} {
			if id, ok, err := statID(p); err == nil && ok && id == r.TargetID {
				oldAt = p
			}
		}
		if oldAt == "" {
			return false, fmt.Errorf("the data from before the restore of %s is neither at %s nor at %s", r.Target, r.Staging, r.Old)
		}
		if err := exchange(oldAt, r.Target); err != nil {
			return false, fmt.Errorf("swap %s back: %w", r.Target, err)
		}
		log.Info("restore undone", "target", r.Target, "restored tree removed from", oldAt)
		return true, datadir.RemoveTree(oldAt)
	case !exists && r.Existed:
		// Not swapped, but the live tree is missing: it can only be at Old
		// or Staging if a swap half-happened, which rename cannot do.
		return false, fmt.Errorf("%s is missing; the journal says it existed", r.Target)
	default:
		// Not swapped (or an undo already swapped back): the staging tree,
		// and a restored tree an earlier undo left at Old, are ours.
		if id, ok, err := statID(r.Old); err == nil && ok && id == r.StagingID {
			if err := datadir.RemoveTree(r.Old); err != nil {
				return false, err
			}
		}
		return false, datadir.RemoveTree(r.Staging)
	}
}

// exchange swaps two paths atomically (renameat2 RENAME_EXCHANGE) and
// makes it durable.
func exchange(a, b string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		return err
	}
	return syncParents(a, b)
}

// renameNoReplace renames a to b unless b exists, durably.
func renameNoReplace(a, b string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_NOREPLACE); err != nil {
		return err
	}
	return syncParents(a, b)
}

func syncParents(a, b string) error {
	if err := atomicfile.SyncDir(filepath.Dir(a)); err != nil {
		return err
	}
	if filepath.Dir(b) != filepath.Dir(a) {
		return atomicfile.SyncDir(filepath.Dir(b))
	}
	return nil
}

// statID returns the identity of p, not following a final symlink.
func statID(p string) (fileID, bool, error) {
	var st unix.Stat_t
	err := unix.Lstat(p, &st)
	if errors.Is(err, unix.ENOENT) {
		return fileID{}, false, nil
	}
	if err != nil {
		return fileID{}, false, fmt.Errorf("lstat %s: %w", p, err)
	}
	return idOf(&st), true, nil
}
