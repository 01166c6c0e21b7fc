package backup

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/fsat"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/release"
)

// Owner is a numeric user and group.
type Owner struct{ UID, GID int }

// RestoreOptions say what Restore restores and where.
type RestoreOptions struct {
	// Archive is the archive file: one hbx wrote, or a plain
	// `tar -czf - -C DATA . [| gpg --symmetric]`.
	Archive string
	// Passphrase is asked for when the archive is encrypted.
	Passphrase PassphraseFunc
	// DataDir is executor.data_dir: the archive's root goes there.
	DataDir string
	// RuntimeDir (which holds the lock), StateDir and BackupDir are never
	// replaced: an extra path of the archive that contains one of them is
	// refused unless DataOnly.
	RuntimeDir, StateDir, BackupDir string
	// DataOnly restores the data directory only, not the archive's extra
	// paths.
	DataOnly bool
	// AllowedPaths are the configured backup.paths: each extra path the
	// archive names must be one of them (compared cleaned, and with
	// symlinks resolved), else the restore is refused (ErrInvalid) before
	// anything changes, unless DataOnly. An archive is input: without this
	// rule one could name /etc and have root replace it. nil allows none.
	AllowedPaths []string
	// Owner is executor.user's uid and gid: the restored data directory
	// gets it, and every entry the archive gave its root's owner gets it
	// too. Restoring for another user than the one running hbx needs root.
	Owner Owner
	// KeepPreRestore is how many <dir>.pre-restore-<ts> copies to keep per
	// directory, this restore's included (backup.keep_pre_restore). 0 keeps
	// none once the restore is confirmed.
	KeepPreRestore int
	// KeepAs is the kind of copy each replaced tree (the data directory's
	// and every extra backup.paths directory's) becomes, moved there once,
	// in the swap (a failure of that move undoes the restore):
	// datadir.PreRestore when "". Package upgrade's rollback passes
	// datadir.RolledBack, so what the newer release's box wrote, held by
	// no archive, is never one of the pre-restore copies a later restore
	// prunes.
	KeepAs datadir.Kind
	// HealthWait bounds the wait for the services to be healthy on the
	// restored data.
	HealthWait time.Duration
	// LockWait is how long to wait for the lock; 0 fails at once.
	LockWait time.Duration
	// Services stops the programs around the swap and checks their health
	// after; nil when no supervisor runs (then nothing is started or
	// checked, and nothing may hold files in the directories).
	Services Services
	// Runtime installs the runtime the archive was written by when it is
	// not the active one; nil skips that step.
	Runtime Runtime
	// WithoutRuntime lets the restore put the data back with the
	// programs left stopped when Runtime cannot get the archive's image
	// (ErrRuntimeUnavailable) while another release is active; with no
	// active release it does so anyway (nothing ran on the data). Any
	// other install failure undoes the restore as before.
	WithoutRuntime bool
	// Config pins the archive's release in the config file when the
	// configuration names another (with Runtime set); nil leaves the
	// config file alone and only notes the difference. A pin that cannot
	// take effect (Config.CanPin) refuses the restore before anything
	// changes (ErrInvalid).
	Config Config
	// Image and Platform are the configured executor.image and
	// executor.platform, for notes when the archive's differ.
	Image, Platform string
	// AllowedRepository reports whether the box may run images of a
	// repository (release.ImageRef.Name): the only repositories whose
	// releases a restore brings back besides Image's (PlanRestore).
	// The composer sets config.Config.RepositoryAllowed; nil
	// allows Image's repository alone.
	AllowedRepository func(name string) bool
	// AcceptImage is the image (name:tag@sha256:...) the operator accepts
	// from an archive that is not authenticated (not encrypted with the
	// box's passphrase): only then may such an archive change the
	// runtime, and only to exactly this image (hbx restore
	// --accept-image).
	AcceptImage string
	// Command is the operator's command line, quoted for a shell
	// (ShellWord), without --accept-image and --without-runtime: a hint
	// to run the restore again appends the flags it needs to it, so it
	// runs as printed. "" means hbx restore ARCHIVE (with --data-only).
	Command  string
	Logger   *slog.Logger
	Progress Progress
	Now      func() time.Time
}

// RestoreResult is what Restore did.
type RestoreResult struct {
	Archive  string        `json:"archive"`
	Files    int           `json:"files"`
	Entries  int           `json:"entries"`
	Bytes    int64         `json:"bytes"`
	Duration time.Duration `json:"-"`
	// Restored maps each replaced directory to where its previous content
	// is kept ("" when it did not exist before).
	Restored map[string]string `json:"restored"`
	// RuntimeChanged says the restore installed the archive's runtime.
	RuntimeChanged bool `json:"runtime_changed"`
	// Pinned is the image the restore pinned in the config file, and
	// PinnedOver the one the configuration named before ("" when the
	// pin did not change).
	Pinned     string `json:"pinned,omitempty"`
	PinnedOver string `json:"pinned_over,omitempty"`
	// Healthy says the services were started and answered; false when no
	// supervisor runs.
	Healthy bool `json:"healthy"`
	// WithoutRuntime is the archive's image when the data was restored
	// without it (it could not be installed): nothing was started, and
	// the journal waits for that release (AwaitedRuntime).
	WithoutRuntime string `json:"without_runtime,omitempty"`
	// NotStartedBecause is the install's error when WithoutRuntime is set.
	NotStartedBecause string `json:"not_started_because,omitempty"`
	// NextSteps is NextSteps(WithoutRuntime) when that is set: what to
	// run, on one line.
	NextSteps string `json:"next_steps,omitempty"`
	// Notes say what could not be checked or needs attention.
	Notes     []string `json:"notes,omitempty"`
	Pruned    []string `json:"pruned,omitempty"`
	Recovered string   `json:"recovered,omitempty"`
}

// restoreRoot is one directory being restored.
type restoreRoot struct {
	arch   string // archive path of its root: "." or ".hbx-paths/a/b"
	target string
	sink   *sink
	remap  bool // give entries owned like the archive root the Owner
	// remapAll gives every entry the Owner, refuses symlinks leading
	// out of the directory and keeps user.* xattrs only (an archive that
	// is not authenticated decides no owner, plants no path outside and
	// no privilege).
	remapAll bool
	from     Owner // the archive root's owner, once its entry was read
	seen     bool  // the archive root's entry was read
	// dropped counts the xattrs not applied (keepXattr).
	dropped droppedXattrs
}

// Restore replaces the data directory (and the archive's extra paths)
// with the archive's content; see the package doc for the steps and what
// each failure leaves. Errors before the swap change nothing. Each step
// below names the crash window (package doc) it leaves open.
func Restore(ctx context.Context, opts RestoreOptions) (res *RestoreResult, err error) {
	// Check the options: nothing changed.
	r, err := newRestoreRun(opts)
	if err != nil {
		return nil, err
	}
	lk, err := acquire(ctx, opts.RuntimeDir, "hbx restore", opts.LockWait, r.log)
	if err != nil {
		return nil, err
	}
	defer unlockInto(lk, &err)
	ctx = lock.WithHeld(ctx, lk)
	r.prog.Event(Event{Kind: EventLocked})
	// Recover: finish or undo an interrupted restore (idempotent steps).
	if r.res.Recovered, err = recoverLocked(ctx, recoverOptions{dataDir: opts.DataDir, runtimeDir: opts.RuntimeDir, services: opts.Services, runtime: opts.Runtime, config: opts.Config, log: r.log}); err != nil {
		return nil, err
	}
	// Open and plan (archive, roots, pin, space): nothing changed.
	defer r.closeArchive()
	if err := r.openAndPlan(); err != nil {
		return nil, err
	}
	// Stage (window "restore, staging"): the journal, then the verified
	// trees beside the targets; the data is untouched.
	if err := r.writeStagingJournal(); err != nil {
		return nil, err
	}
	defer r.removeStagingOnFailure(&err)
	if err := r.stageArchive(ctx); err != nil {
		return nil, err
	}
	// Stop the services; a failure from here on starts them again.
	if err := r.stopServices(ctx); err != nil {
		return nil, err
	}
	defer r.restartOnFailure(ctx, &err)
	// Runtime (window "release change recorded"): the archive's release
	// active, the data untouched.
	if err := r.activateRuntime(ctx); err != nil {
		return nil, err
	}
	// Swap (window "swapped, before the pin").
	if err := r.swapIn(); err != nil {
		return nil, err
	}
	// Pin (window "swapped, not confirmed").
	if err := r.pin(); err != nil {
		return nil, err
	}
	// Start and check, then commit (window "restore, confirmed"):
	// committed or undone, never left half-way. Without the archive's
	// runtime: "restored, not started", never undone by a recovery.
	if err := r.finish(ctx); err != nil {
		return nil, err
	}
	r.res.Duration = time.Since(r.start)
	return r.res, nil
}

// undoUnhealthy swaps the old data back after the services failed on the
// restored data, restarts them, and returns the error to report.
func undoUnhealthy(ctx context.Context, opts RestoreOptions, j *journal, herr error, log *slog.Logger, prog Progress) error {
	if supervisorGone(opts.Services) {
		return undoGone(ctx, opts, j, log, prog)
	}
	log.Error("services unhealthy on the restored data; putting the old data back", "err", herr)
	hold, err := opts.Services.Hold(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w; stopping them to undo failed, the next hbx start undoes it: %w", ErrUnhealthy, herr, err)
	}
	did, _, uerr := undo(ctx, j, opts.Runtime, opts.Config, log)
	rerr := hold.Release()
	if uerr != nil {
		return fmt.Errorf("%w: %w; undo failed, the next hbx start retries it: %w", ErrUnhealthy, herr, uerr)
	}
	if err := endJournal(opts.DataDir, j); err != nil {
		return err
	}
	prog.Event(Event{Kind: EventUndone})
	after := "healthy again"
	if rerr != nil {
		after = fmt.Sprintf("not started again: %v", rerr)
	} else {
		hctx, cancel := context.WithTimeout(ctx, opts.HealthWait)
		if err := opts.Services.WaitHealthy(hctx); err != nil {
			after = fmt.Sprintf("still unhealthy: %v", err)
		}
		cancel()
	}
	also := "" // the pin and runtime put back, when they were changed
	for _, d := range did {
		if !strings.HasPrefix(d, "the data from before") {
			also += d + "; "
		}
	}
	return fmt.Errorf("%w on the restored data: %w; %sthe old data is back and the services are %s", ErrUnhealthy, herr, also, after)
}

// undoGone puts the old data back after the supervisor went away during
// the health wait: its programs died with it, so nothing is stopped, but
// no process may hold files in the restored directories. When one does,
// the journal is left for the next hbx supervise.
func undoGone(ctx context.Context, opts RestoreOptions, j *journal, log *slog.Logger, prog Progress) error {
	log.Error("the supervisor is gone during the health wait; putting the old data back")
	if err := waitNotBusy(ctx, targets(j)); err != nil {
		return fmt.Errorf("%w during the health wait on the restored data: the restored data stays until the next hbx supervise undoes the restore (journal %s): %w", ErrSupervisorGone, journalPath(opts.DataDir), err)
	}
	if _, _, err := undo(ctx, j, opts.Runtime, opts.Config, log); err != nil {
		return fmt.Errorf("%w during the health wait on the restored data: undo failed, the next hbx supervise retries it: %w", ErrSupervisorGone, err)
	}
	if err := endJournal(opts.DataDir, j); err != nil {
		return err
	}
	prog.Event(Event{Kind: EventUndone})
	back := "the old data is back"
	if j.Runtime != nil && j.Runtime.Changed {
		back = "the old data and the runtime active before are back"
	}
	return fmt.Errorf("%w during the health wait on the restored data: restore undone, %s; nothing runs: start hbx supervise", ErrSupervisorGone, back)
}

// restoreRoots maps the archive's roots to directories: "." to the data
// directory, each extra path of the manifest to itself (unless DataOnly).
func restoreRoots(opts RestoreOptions, m *Manifest) ([]*restoreRoot, error) {
	roots := []*restoreRoot{{arch: ".", target: resolved(opts.DataDir), remap: true}}
	if m == nil || opts.DataOnly {
		return roots, nil
	}
	keep := []struct{ what, dir string }{{"the data directory", opts.DataDir}, {"the runtime directory", opts.RuntimeDir}, {"the state directory", opts.StateDir}, {"the backup directory", opts.BackupDir}}
	for _, p := range m.Paths {
		if !slices.ContainsFunc(opts.AllowedPaths, func(a string) bool { return samePath(a, p) }) {
			return nil, fmt.Errorf("%w: the archive's extra path %s is not one of backup.paths (%s): a restore replaces only configured directories; add it to backup.paths, or restore with --data-only and copy what you need from the archive", ErrInvalid, release.Shown(p), strings.Join(opts.AllowedPaths, ", "))
		}
		for _, k := range keep {
			if k.dir != "" && (p == k.dir || within(p, k.dir) || within(k.dir, p)) {
				return nil, fmt.Errorf("%w: the archive's extra path %s contains or is inside %s (%s), which a restore never replaces; restore with --data-only and copy what you need from the archive", ErrInvalid, p, k.what, k.dir)
			}
		}
		roots = append(roots, &restoreRoot{arch: extraArchPath(p), target: resolved(p)})
	}
	return roots, nil
}

// refuseMountPoints fails, wrapping ErrInvalid, when a target of roots is
// a mount point: swap exchanges it with a sibling by rename, which cannot
// move a mount (EBUSY), so a container volume must hold its parent.
func refuseMountPoints(roots []*restoreRoot) error {
	for _, r := range roots {
		if mnt, err := fsat.IsMountRoot(r.target); err == nil && mnt {
			return fmt.Errorf("%w: %s is a mount point: a restore swaps it with a sibling by rename, which cannot move a mount (mount the volume on its parent)", ErrInvalid, r.target)
		}
	}
	return nil
}

// freshNames returns the staging path of target for a restore at ts and
// the path of kind kept its replaced tree goes to, with a "-N" suffix when
// an earlier restore of the same second left either.
func freshNames(target, ts string, kept datadir.Kind) journalRoot {
	for seq := 0; ; seq++ {
		sfx := ts
		if seq > 0 {
			sfx = fmt.Sprintf("%s-%d", ts, seq)
		}
		r := journalRoot{Target: target, Staging: datadir.Staging.Path(target, sfx), Old: kept.Path(target, sfx)}
		_, e1 := os.Lstat(r.Staging)
		_, e2 := os.Lstat(r.Old)
		if os.IsNotExist(e1) && os.IsNotExist(e2) {
			return r
		}
	}
}

// samePath reports whether a and b name the same directory: equal when
// cleaned, or after resolving symlinks.
func samePath(a, b string) bool {
	a, b = filepath.Clean(a), filepath.Clean(b)
	return a == b || resolved(a) == resolved(b)
}

// resolved returns p with symlinks resolved when it exists, so a data
// directory reached through a symlink is replaced where it lives (the
// symlink stays), and p itself otherwise.
func resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// route returns the root an archive path belongs to and the path relative
// to it ("" for the root itself), or nil for what is not restored: with
// extras, the parents of their roots under .hbx-paths, and with DataOnly
// the extras themselves.
func route(roots []*restoreRoot, extras bool, p string) (*restoreRoot, string) {
	for _, r := range roots[1:] {
		if p == r.arch {
			return r, ""
		}
		if rel, ok := strings.CutPrefix(p, r.arch+"/"); ok {
			return r, rel
		}
	}
	if extras && (p == PathsPrefix || strings.HasPrefix(p, PathsPrefix+"/")) {
		return nil, ""
	}
	if p == "." {
		return roots[0], ""
	}
	return roots[0], p
}

// stage extracts the archive into the staging directories through one
// extract.Applier per root, fed by a tar stream re-written with names
// relative to that root.
func stage(ctx context.Context, ar *reader, roots []*restoreRoot, j *journal, opts RestoreOptions, log *slog.Logger) (err error) {
	// Writeback overlaps with extraction, so the syncfs before the swap
	// has little left to do.
	fl := atomicfile.NewFlusher(filepath.Dir(roots[0].target))
	defer fl.Wait()
	defer func() {
		for _, r := range roots {
			if cerr := r.sink.close(err); err == nil && cerr != nil {
				err = cerr
			}
		}
	}()
	if err := openSinks(roots, j, log); err != nil {
		return err
	}
	if err := feedSinks(ctx, ar, roots, opts.Owner, fl); err != nil {
		return err
	}
	fl.Wait()
	return closeSinks(roots, j, opts.Owner)
}

// openSinks creates each root's staging directory and its applier, bound
// by the free space of the data directory's file system.
func openSinks(roots []*restoreRoot, j *journal, log *slog.Logger) (err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(roots[0].target), &st); err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	xopts := extract.Options{
		MaxBytes:       int64(st.Bavail) * int64(st.Bsize),
		PreserveOwners: os.Geteuid() == 0,
		Xattrs:         true,
		Literal:        true,
		Logger:         log,
	}
	for i, r := range roots {
		if err := os.MkdirAll(filepath.Dir(r.target), 0o755); err != nil {
			return fmt.Errorf("create parent of %s: %w", r.target, err)
		}
		if err := os.Mkdir(j.Roots[i].Staging, 0o700); err != nil {
			return fmt.Errorf("create staging directory: %w", err)
		}
		if r.sink, err = newSink(j.Roots[i].Staging, xopts); err != nil {
			return err
		}
	}
	return nil
}

// feedSinks routes every entry of the archive to its root's sink, kicking
// a background flush every flushEvery bytes.
func feedSinks(ctx context.Context, ar *reader, roots []*restoreRoot, owner Owner, fl *atomicfile.Flusher) error {
	var flushed int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := ar.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		r, rel := route(roots, ar.Manifest != nil && len(ar.Manifest.Paths) > 0, hdr.Name)
		if r == nil {
			continue
		}
		if err := r.put(hdr, rel, ar, owner); err != nil {
			return err
		}
		if ar.Bytes-flushed > flushEvery {
			flushed = ar.Bytes
			fl.Kick()
		}
	}
}

// closeSinks finishes every root's stream and gives the data directory's
// staging tree its owner and mode 0700.
func closeSinks(roots []*restoreRoot, j *journal, owner Owner) error {
	for i, r := range roots {
		err := r.sink.close(nil)
		r.sink = nil
		if err != nil {
			return fmt.Errorf("extract into %s: %w", j.Roots[i].Staging, err)
		}
		if r.remapAll {
			if err := checkSymlinksBeneath(j.Roots[i].Staging, r.arch); err != nil {
				return err
			}
		}
		if r.remap {
			if err := os.Chown(j.Roots[i].Staging, owner.UID, owner.GID); err != nil && os.Geteuid() == 0 {
				return fmt.Errorf("chown %s: %w", j.Roots[i].Staging, err)
			}
			if err := os.Chmod(j.Roots[i].Staging, 0o700); err != nil {
				return fmt.Errorf("chmod %s: %w", j.Roots[i].Staging, err)
			}
		}
	}
	return nil
}

// put writes one entry into r's stream.
func (r *restoreRoot) put(hdr *tar.Header, rel string, body io.Reader, owner Owner) error {
	h := &tar.Header{
		Typeflag:   hdr.Typeflag,
		Name:       rel,
		Mode:       hdr.Mode,
		Uid:        hdr.Uid,
		Gid:        hdr.Gid,
		ModTime:    hdr.ModTime,
		AccessTime: hdr.AccessTime,
		Format:     tar.FormatPAX,
	}
	if rel == "" {
		h.Name = "./"
		r.from, r.seen = Owner{hdr.Uid, hdr.Gid}, true
	}
	if r.remapAll {
		h.Uid, h.Gid = owner.UID, owner.GID
	} else if r.remap && r.seen {
		if h.Uid == r.from.UID {
			h.Uid = owner.UID
		}
		if h.Gid == r.from.GID {
			h.Gid = owner.GID
		}
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archives use '\x00'
		h.Typeflag, h.Size = tar.TypeReg, hdr.Size
	case tar.TypeSymlink:
		if r.remapAll && leavesRoot(rel, hdr.Linkname) {
			return &entryError{path: hdr.Name, err: fmt.Errorf("%w: symlink to %q leads out of the restored directory, which an archive that is not authenticated may not plant", ErrImageRefused, hdr.Linkname)}
		}
		h.Linkname = hdr.Linkname
	case tar.TypeLink:
		var rel string
		switch {
		case r.arch == ".":
			rel = hdr.Linkname
			if strings.HasPrefix(rel, PathsPrefix+"/") {
				return &entryError{path: hdr.Name, err: fmt.Errorf("%w: hardlink to another restored directory", extract.ErrBadLink)}
			}
		default:
			var ok bool
			if rel, ok = strings.CutPrefix(hdr.Linkname, r.arch+"/"); !ok {
				return &entryError{path: hdr.Name, err: fmt.Errorf("%w: hardlink to another restored directory", extract.ErrBadLink)}
			}
		}
		h.Linkname = rel
	}
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, xattrPrefix); ok {
			if !keepXattr(name, !r.remapAll) {
				r.dropped.add(name)
				continue
			}
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords[k] = v
		}
	}
	if h.Typeflag == tar.TypeReg {
		return r.sink.write(h, body)
	}
	return r.sink.write(h, nil)
}

// leavesRoot reports whether a symlink at rel (relative to its restored
// directory) to target leads out of that directory: an absolute target,
// or one whose ".." climb above it.
func leavesRoot(rel, target string) bool {
	if path.IsAbs(target) {
		return true
	}
	p := path.Join(path.Dir(rel), target)
	return p == ".." || strings.HasPrefix(p, "../")
}

// swap exchanges every staging directory with its target (or renames it
// into place when the target did not exist), then moves the previous tree
// to <target>.pre-restore-<ts>.
func swap(j *journal, log *slog.Logger) error {
	for _, r := range j.Roots {
		if r.Existed {
			if err := exchange(r.Staging, r.Target); err != nil {
				return fmt.Errorf("exchange %s and %s: %w", r.Staging, r.Target, err)
			}
			if err := renameNoReplace(r.Staging, r.Old); err != nil {
				return fmt.Errorf("keep the previous %s at %s: %w", r.Target, r.Old, err)
			}
		} else if err := renameNoReplace(r.Staging, r.Target); err != nil {
			return fmt.Errorf("move %s into place: %w", r.Staging, err)
		}
		log.Info("restored", "dir", r.Target, "previous", r.Old, "existed", r.Existed)
	}
	return nil
}

// activeManifest is the active release's manifest digest, "" when none is
// active.
func activeManifest(runtimeDir string) digest.Digest {
	if cur, err := release.Current(runtimeDir); err == nil {
		return cur.Meta.ManifestDigest
	}
	return ""
}

// planPin returns what the restore pins in the config file: nil when
// there is no Config, no Runtime, no manifest naming a release, or the
// configuration already names the archive's release. It refuses
// (ErrInvalid) when the pin is needed and cannot take effect.
func planPin(opts RestoreOptions, m *Manifest) (*journalPin, error) {
	if opts.Config == nil || opts.Runtime == nil || m == nil || m.Image == "" {
		return nil, nil
	}
	img, man, err := opts.Config.Pinned()
	if err != nil {
		return nil, fmt.Errorf("read the configured release: %w", err)
	}
	_, idx, _ := strings.Cut(img, "@")
	if (release.Target{IndexDigest: digest.Digest(idx), Platform: opts.Platform, ManifestDigest: man}).On(m.Platform).Check(m.Target()) == nil {
		return nil, nil
	}
	if err := opts.Config.CanPin(); err != nil {
		return nil, fmt.Errorf("%w: the archive was written by %s, the configuration names %s, and the restore must pin the archive's release where the supervisor reads it: %w (nothing changed)", ErrInvalid, m.Image, img, err)
	}
	return &journalPin{PriorImage: img, PriorManifest: man, Image: m.Image}, nil
}

// ensureRuntime makes the runtime the archive was written by the active
// release, installing it when missing. Before it switches anything, it
// records in the journal what was active before and, with pin, the
// config file's pin that Restore rewrites after the swap.
func ensureRuntime(ctx context.Context, opts RestoreOptions, m *Manifest, j *journal, pin *journalPin, res *RestoreResult) error {
	if opts.Runtime == nil {
		return nil
	}
	image, platform := "", ""
	var want digest.Digest
	cur, cerr := release.Current(opts.RuntimeDir)
	active := false
	if m != nil && m.Image != "" {
		image, platform, want = m.Image, m.Platform, m.ManifestDigest
		if cerr == nil && m.Target().On(cur.Meta.Platform).Check(cur.Meta.Target()) == nil {
			if _, perr := cur.Program(); perr == nil {
				active = true
			}
		}
		if m.Image != opts.Image && opts.Config == nil {
			res.Notes = append(res.Notes, fmt.Sprintf("the archive was written by %s, the configuration names %s: the archive's runtime is now active; set executor.image to keep it, or run hbx install to move to the configured one (which may migrate the data)", m.Image, opts.Image))
		}
	}
	if active && pin == nil {
		return nil
	}
	jr := &journalRuntime{Pin: pin}
	if cerr == nil {
		jr.PriorImage, jr.PriorPlatform, jr.PriorManifest = cur.Meta.Image, cur.Meta.Platform, cur.Meta.ManifestDigest
	}
	j.Runtime = jr
	if err := j.write(opts.DataDir); err != nil {
		return err
	}
	if active {
		return nil
	}
	changed, err := opts.Runtime.Install(ctx, image, platform, want)
	if err != nil {
		return fmt.Errorf("install the archive's runtime: %w", err)
	}
	jr.Changed = changed
	res.RuntimeChanged = changed
	return j.write(opts.DataDir)
}

// sink is one extract.Applier fed through a pipe.
type sink struct {
	pw   *io.PipeWriter
	tw   *tar.Writer
	done chan error
	ap   *extract.Applier
}

func newSink(dir string, opts extract.Options) (*sink, error) {
	ap, err := extract.New(dir, opts)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	s := &sink{pw: pw, tw: tar.NewWriter(pw), done: make(chan error, 1), ap: ap}
	go func() {
		err := ap.Apply(pr)
		if err != nil {
			pr.CloseWithError(err)
		} else {
			pr.Close()
		}
		s.done <- err
	}()
	return s, nil
}

// write writes one entry. When the applier failed, the pipe returns its
// error.
func (s *sink) write(h *tar.Header, body io.Reader) error {
	if err := s.tw.WriteHeader(h); err != nil {
		return err
	}
	if body == nil {
		return nil
	}
	bp := bufPool.Get().(*[]byte)
	_, err := io.CopyBuffer(s.tw, readerOnly{body}, *bp)
	bufPool.Put(bp)
	return err
}

// close finishes the stream and returns the applier's error; with a cause,
// it aborts the stream instead and returns nil (the caller has the cause).
// It may be called on a nil sink.
func (s *sink) close(cause error) error {
	if s == nil {
		return nil
	}
	var err error
	if cause == nil {
		err = s.tw.Close()
		s.pw.CloseWithError(err)
	} else {
		s.pw.CloseWithError(cause)
	}
	aerr := <-s.done
	cerr := s.ap.Close()
	if cause != nil {
		return nil
	}
	switch {
	case aerr != nil:
		return aerr
	case err != nil:
		return err
	}
	return cerr
}

// flushEvery is how many extracted bytes start a background syncfs.
const flushEvery = 128 << 20

// rerun is the command that runs this restore again with flags added
// (each quoted): opts.Command, by default hbx restore ARCHIVE.
func (opts RestoreOptions) rerun(flags ...string) string {
	cmd := opts.Command
	if cmd == "" {
		cmd = "hbx restore " + ShellWord(opts.Archive)
		if opts.DataOnly {
			cmd += " --data-only"
		}
	}
	for _, f := range flags {
		cmd += " " + ShellWord(f)
	}
	return cmd
}

// ShellWord quotes s as one word for a POSIX shell: as it is when it has
// only characters no shell treats specially, else in single quotes.
func ShellWord(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%_+=:,./-", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
