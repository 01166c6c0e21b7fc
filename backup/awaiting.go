package backup

// Restore without a runtime: the "restored, not started" journal
// (phaseNotStarted), how Restore enters it and how Recover leaves it.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/release"
)

// AwaitedError is AwaitedRuntime's error: data restored from Archive
// waits for Image, which is not the active release. It wraps
// ErrRuntimeAwaited.
type AwaitedError struct {
	Journal  string    // <data_dir>.restore.json
	Archive  string    // the archive restored
	Image    string    // the archive's image, name:tag@sha256:...
	Restored time.Time // when the restore began
	// Configured: the archive names no release (a plain tar): Image is
	// the configured one it was restored for.
	Configured bool
}

// Error names the image needed and what to run, in one line.
func (e *AwaitedError) Error() string {
	which := "which wrote"
	if e.Configured {
		which = "the configured release (the archive names none), awaited by"
	}
	return fmt.Sprintf("%v: %s, %s the data restored from %s (%s), is not installed: %s (journal %s)",
		ErrRuntimeAwaited, e.Image, which, e.Archive, e.Restored.Format(time.RFC3339), NextSteps(e.Image), e.Journal)
}

// NextSteps is what to run, in one line, on data restored without its
// runtime image (name:tag@sha256:...): install it from the registry or
// from a file (an `hbx export` of a box where it is active, or the skopeo
// command that copies it with its index, digests kept), with
// executor.image naming it, then start the programs; or, when that image
// cannot be had, the way out that needs no image: restore other data
// (`hbx restore`, which replaces the data waiting).
func NextSteps(image string) string {
	copyCmd := "skopeo copy --all --preserve-digests docker://NAME@DIGEST oci-archive:FILE:TAG"
	if r, err := release.ParseImageRef(image); err == nil {
		copyCmd = fmt.Sprintf("skopeo copy --all --preserve-digests docker://%s@%s oci-archive:FILE:%s", r.Name, r.Digest, r.Tag)
	}
	return "install it: `hbx install` once the registry answers, or offline `hbx install --from FILE` with FILE written by `hbx export FILE` on a box where it is active or by `" +
		copyCmd + "` where the registry answers (executor.image must name it); then start `hbx supervise` (a running one starts the programs within seconds); " +
		"or, if it cannot be had, restore another archive over this data: `hbx restore ARCHIVE`"
}

// Brief is the short form for a program's status line: "awaits runtime
// IMAGE".
func (e *AwaitedError) Brief() string { return "awaits runtime " + e.Image }

// Unwrap makes errors.Is(err, ErrRuntimeAwaited) true.
func (e *AwaitedError) Unwrap() error { return ErrRuntimeAwaited }

// AwaitedRuntime returns an *AwaitedError when the data directory's
// restore journal records data restored without its runtime and that
// runtime is not the active release of runtimeDir; nil when there is no
// such journal or the release is active (the next Recover finishes it).
// Nothing may start on the data while it returns one, and no other
// release may be installed over it.
func AwaitedRuntime(dataDir, runtimeDir string) error {
	j, err := readJournal(dataDir)
	if err != nil {
		return err
	}
	if j == nil || j.Phase != phaseNotStarted || j.Awaiting == nil || awaitMet(runtimeDir, j.Awaiting) {
		return nil
	}
	return &AwaitedError{Journal: journalPath(dataDir), Archive: j.Archive, Image: j.Awaiting.Image, Restored: j.Started, Configured: j.Awaiting.Configured}
}

// awaitMet reports whether a's release is the active one in runtimeDir
// and can run.
func awaitMet(runtimeDir string, a *journalAwait) bool {
	cur, err := release.Current(runtimeDir)
	if err != nil {
		return false
	}
	want := a.Target
	if want.On(cur.Meta.Platform).Check(cur.Meta.Target()) != nil {
		return false
	}
	_, perr := cur.Program()
	return perr == nil
}

// resumeNotStarted finishes a restore done without its runtime once that
// runtime is active (installing it first with installAwaited): old
// pre-restore copies are pruned and the journal removed, as for a
// confirmed restore. While the runtime is missing it changes nothing and
// returns "": such a restore is never undone.
func resumeNotStarted(ctx context.Context, o recoverOptions, j *journal) (string, error) {
	a := j.Awaiting
	if a == nil {
		return "", fmt.Errorf("restore journal %s is in phase %s but names no release; check the data directory by hand", journalPath(o.dataDir), j.Phase)
	}
	how := "is active"
	if !awaitMet(o.runtimeDir, a) {
		if !o.installAwaited || o.runtime == nil {
			return "", nil
		}
		if err := awaitPinned(o, j); err != nil {
			return "", err
		}
		if _, err := o.runtime.Install(ctx, a.Image, a.Platform, a.ManifestDigest); err != nil {
			return "", fmt.Errorf("install %s, the runtime of the data restored from %s: %w", a.Image, j.Archive, err)
		}
		how = "was installed (executor.install_on_start)"
	}
	for _, r := range j.Roots {
		if _, err := datadir.Prune(r.Target, datadir.PreRestore, j.Keep); err != nil {
			o.log.Warn("prune pre-restore copies", "err", err)
		}
	}
	if err := removeJournal(o.dataDir); err != nil {
		return "", err
	}
	if o.releaseBack != nil {
		*o.releaseBack = true // the programs left stopped may start now
	}
	msg := fmt.Sprintf("finished the restore of %s, done without its runtime: %s %s", j.Archive, a.Image, how)
	o.log.Info(msg)
	return msg, nil
}

// awaitPinned checks, before installAwaited installs j's awaited release,
// that it is the one the config file pins (the restore pinned it): a
// journal edited to name another image or manifest installs nothing.
// Without a Config there is nothing to compare with.
func awaitPinned(o recoverOptions, j *journal) error {
	if o.config == nil {
		return nil
	}
	img, man, err := o.config.Pinned()
	if err != nil {
		return fmt.Errorf("read the config file's pin: %w", err)
	}
	a := j.Awaiting
	_, pinned, _ := strings.Cut(img, "@")
	_, awaited, _ := strings.Cut(a.Image, "@")
	sameImage := img == a.Image || pinned != "" && pinned == awaited // one index digest, however the name is spelled
	if !sameImage || man != "" && a.ManifestDigest != "" && man != a.ManifestDigest {
		return fmt.Errorf("restore journal %s awaits %s (manifest %s) but the config file pins %s (manifest %s): not installing a release the configuration does not pin; check the journal and the config file by hand",
			journalPath(o.dataDir), a.Image, a.ManifestDigest, img, man)
	}
	return nil
}

// mayGoWithout reports whether Restore may put the data back without its
// runtime after ensureRuntime failed with err: the image could not be had
// (ErrRuntimeUnavailable), the restore has a release to wait for, the
// install left the release active before it in place, and either
// RestoreOptions.WithoutRuntime asks for it or no runtime was active (no
// program ran on the data, so leaving them stopped loses nothing).
func (r *restoreRun) mayGoWithout(err error) bool {
	if !errors.Is(err, ErrRuntimeUnavailable) || r.awaited() == nil || r.j.Runtime == nil {
		return false
	}
	jr := r.j.Runtime
	if activeManifest(r.opts.RuntimeDir) != jr.PriorManifest {
		return false // the install switched something: undo as before
	}
	return r.opts.WithoutRuntime || jr.PriorImage == ""
}

// awaited is the release the restored data is to wait for: the
// archive's, or the configured one when the archive names none (a plain
// tar, restored for the configured release, which Runtime was asked
// for); nil when neither is known.
func (r *restoreRun) awaited() *journalAwait {
	if m := r.m; m != nil && m.Image != "" {
		return &journalAwait{Target: m.Target()}
	}
	if r.opts.Image == "" {
		return nil
	}
	a := &journalAwait{Target: release.Target{Image: r.opts.Image, Platform: r.opts.Platform}, Configured: true}
	if _, d, ok := strings.Cut(r.opts.Image, "@"); ok {
		a.IndexDigest = digest.Digest(d)
	}
	if r.opts.Config != nil {
		if img, man, err := r.opts.Config.Pinned(); err == nil && img == r.opts.Image {
			a.ManifestDigest = man
		}
	}
	return a
}

// goWithout records that the restore goes on without the archive's
// runtime: the journal keeps the release change (so an interrupt before
// the swap is undone as before), and the note says what happened.
func (r *restoreRun) goWithout(err error) {
	r.without = true
	image := r.awaited().Image
	r.log.Warn("the archive's runtime cannot be installed; restoring the data with the programs left stopped", "image", image, "err", err)
	r.res.WithoutRuntime, r.res.NotStartedBecause, r.res.NextSteps = image, err.Error(), NextSteps(image)
}

// finish ends a restore from the pin on: startAndCheck and commit, or
// leaveStopped without the archive's runtime.
func (r *restoreRun) finish(ctx context.Context) error {
	if r.without {
		return r.leaveStopped()
	}
	if err := r.startAndCheck(ctx); err != nil {
		return err
	}
	return r.commit()
}

// leaveStopped ends a restore done without its runtime: the journal
// moves to "restored, not started" with the archive's release, the hold
// is released (a running supervisor refuses Executor: the pin names a
// release that is not active), and the pre-restore copies stay until the
// restore finishes.
func (r *restoreRun) leaveStopped() error {
	r.j.Phase, r.j.Prior = phaseNotStarted, nil // this restore's data replaces a prior one's
	r.j.Awaiting = r.awaited()
	if err := r.j.write(r.opts.DataDir); err != nil {
		return r.undoNow(err)
	}
	r.prog.Event(Event{Kind: EventNotStarted, Detail: r.j.Awaiting.Image})
	if err := r.release(); err != nil {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("release the programs' hold: %v", err))
	}
	return nil
}

// NeededReleases names the releases an unfinished restore of dataDir
// still needs, so that pruning keeps them: the one restored data awaits
// ("restored, not started"), the one active before the restore (an undo
// switches back to it, and the pre-restore copies kept hold data it
// wrote), and the same for the restore it began over (Prior). None when
// there is no restore journal; the journal's read error (a journal of
// another format included) otherwise, when the caller should keep every
// release.
func NeededReleases(dataDir string) ([]release.Target, error) {
	j, err := readJournal(dataDir)
	if err != nil {
		return nil, err
	}
	var out []release.Target
	for ; j != nil; j = j.Prior {
		if j.Awaiting != nil {
			out = append(out, j.Awaiting.Target)
		}
		if r := j.Runtime; r != nil && r.PriorManifest != "" {
			out = append(out, release.Target{Image: r.PriorImage, Platform: r.PriorPlatform, ManifestDigest: r.PriorManifest})
		}
	}
	return out, nil
}
