package installer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"time"

	digest "github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/docker/reference"

	"github.com/hermesbox/hbx/release"
)

// ErrReleaseChange: Options.KeepRelease is set and the active release is
// not the configured one.
var ErrReleaseChange = errors.New("the active release is not the configured one")

// ErrBadReference: the image reference lacks an explicit tag or a full
// sha256 digest, or does not parse (release.ErrBadReference).
var ErrBadReference = release.ErrBadReference

// Options is one install request. Image, Platform and RuntimeDir are
// required; the rest have working zero values.
type Options struct {
	Image          string        // name:tag@sha256:<64 hex>
	Platform       string        // os/arch[/variant]
	PlatformDigest digest.Digest // pinned child manifest digest, "" when not pinned
	RuntimeDir     string        // absolute

	MaxUncompressedBytes int64 // cap on all layers' uncompressed bytes; 0 = none
	// Timeout bounds a cold install from when the lock is held: Timeout,
	// plus the image's compressed size at MinRate bytes per second once
	// the manifest is known. When it passes, the install stops with
	// ErrTimeout and nothing is activated. 0: no bound.
	Timeout   time.Duration
	MinRate   int64         // bytes per second; 0: Timeout alone
	KeepBlobs bool          // keep the blobs of releases on disk after a run (else none); see the package doc
	LockWait  time.Duration // wait this long for another install's lock
	// RunAs is the payload's user (executor.user; nil: the caller):
	// validation checks that it may execute every program the entry
	// program leads to.
	RunAs *syscall.Credential
	// HostPath is the host's PATH the native run appends to the image's
	// PATH entries; "" means release.DefaultHostPath. Validation follows
	// "#!/usr/bin/env NAME" through the same list.
	HostPath string
	// Smoke, when set, runs after the static validation of a staged
	// release (install.smoke_command); its error refuses the release.
	Smoke  SmokeFunc
	Verify bool // re-hash the active release against files.json; a repair it starts applies every layer (ExtractAll) and drops the layer states
	// ExtractAll applies every layer from its blob: no layer state and no
	// earlier release is started from (docs/install.md, "Extracted layers
	// reused"), and none is kept.
	ExtractAll bool
	// StageOnly publishes the release as releases/<hex>, complete,
	// validated and durable, but leaves current and previous alone, for a
	// later Activate; Result.Release is the staged release. Older
	// releases are not cleaned up. When current already is the release,
	// nothing is done (Result.Changed false).
	StageOnly bool
	// KeepRelease refuses, with ErrReleaseChange, to replace an active
	// release that is not the configured one; repairing the configured
	// release, and a first install, go ahead. Checked under the lock, so
	// a caller that decided the change is safe cannot race another.
	KeepRelease bool
	Registry    RegistryOptions
	// Refuse, when set, runs once the runtime directory's lock is held,
	// before anything there is read or changed: its error ends Install,
	// nothing changed (a caller's rule that must hold under the lock:
	// hbx install refuses while an upgrade is half done).
	Refuse func() error
	// Keep, when set, names releases under releases/ that the cleanup
	// after an install keeps besides current and previous (those an
	// unfinished upgrade or restore records; release.Prune's keep).
	Keep func(release.Meta) bool
	// From, when not "", is where a cold install reads the image instead
	// of the registry: a directory is an OCI image layout, a regular file
	// an OCI archive (a tar of one, read in place: never unpacked, no
	// disk beyond the blob store). The image is the one Image's digest names, pinned and checked
	// exactly as from a registry: the blob of that digest is the top
	// document (index.json is not trusted), the child manifest must match
	// PlatformDigest, every blob its digest and size, every layer its
	// diff_id, and the blobs go through the same store. Registry is
	// unused and no network request is made. A warm install, or one that
	// reuses a published release, does not read it, but for Verify with
	// KeepBlobs fetching the kept blobs the store lacks from it. Errors: ErrLocalImage (missing,
	// not a layout, truncated archive, no blob for the index or a
	// manifest or layer), ErrDigestMismatch (bytes that differ), as from
	// a registry; nothing is activated.
	From string
	// Wanted names the image in the message about a From that lacks it
	// (an archive of another release): "" says "the pin wants DIGEST (tag
	// T)"; restore passes "the archive's image".
	Wanted     string
	HbxVersion string // recorded in release.json

	Logger   *slog.Logger // nil discards
	Progress Progress     // nil: no events
}

// Result says what Install did.
type Result struct {
	Changed bool               // false: the active release already matched
	Reason  string             // why it installed, or why nothing was needed
	Release *release.Installed // the active release afterwards
	Fetched int                // layer blobs downloaded (by any run of this Install; see the package doc)
	Reused  int                // layer blobs found complete in the store (hashed as they were read)
	// FetchedBytes and ReusedBytes are the compressed bytes of those
	// layer blobs (the manifest's sizes); the index, manifest and config,
	// a few KiB, are always fetched.
	FetchedBytes, ReusedBytes int64
	// Refetched counts the kept blobs Verify found missing or damaged and
	// fetched again: the layers among them are Fetched, the rest are the
	// index, manifest and config.
	Refetched int
	// From is Options.From when blobs were read from that local image
	// (Fetched or Refetched above 0); "" when they came from the registry
	// or nothing was read.
	From string
	// Location is the repository name the image was fetched from when it
	// came from a registry: the image's own, or the registry.mirrors
	// location that answered first; "" when nothing was fetched from one.
	Location string
	Duration time.Duration
}

// ParseReference checks an image reference has an explicit tag and a full
// sha256 digest (name:tag@sha256:<64 hex>) with release.ParseImageRef; the
// error wraps ErrBadReference.
func ParseReference(s string) (reference.Canonical, error) {
	r, err := release.ParseImageRef(s)
	if err != nil {
		return nil, err
	}
	return r.Canonical(), nil
}

// Install makes the configured release the active one, or confirms it
// already is. See the package doc for what it guarantees.
func Install(ctx context.Context, opts Options) (res *Result, err error) {
	start := time.Now()
	defer func() {
		if res != nil {
			res.Duration = time.Since(start)
			if res.Fetched > 0 || res.Refetched > 0 {
				res.From = opts.From
			}
		}
	}()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	prog := opts.Progress
	if prog == nil {
		prog = nopProgress{}
	}
	ref, plat, err := checkOptions(opts)
	if err != nil {
		return nil, err
	}
	lk, err := release.LockRuntime(ctx, opts.RuntimeDir, "hbx install", opts.LockWait, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if uerr := lk.Unlock(); uerr != nil && err == nil {
			err = fmt.Errorf("release lock: %w", uerr)
		}
	}()
	if opts.Refuse != nil {
		if err := opts.Refuse(); err != nil {
			return nil, err
		}
	}
	cur, reason, err := checkRuntime(opts, ref, plat, log)
	if err != nil || reason == "" { // the active release matches (warm no-op)
		if cur == nil {
			return nil, err
		}
		res = &Result{Reason: "active release matches", Release: cur}
		if opts.Verify {
			if res, err = verifyKept(ctx, opts, ref, plat, cur, log); err != nil {
				return nil, err
			}
		}
		return res, nil
	}
	if opts.KeepRelease && cur != nil && cur.Meta.Matches(ref.Digest(), plat.String(), opts.PlatformDigest) != nil {
		return nil, fmt.Errorf("%w: %s is active, the configuration names %s", ErrReleaseChange, cur.Meta.Image, opts.Image)
	}
	// The configured release may be published already (previous names
	// it after a release change, or an upgrade staged it): it is complete
	// on disk, so reuse it in place.
	if res, err := reusePublished(opts, ref.Digest(), plat.String(), reason, log, prog); res != nil || err != nil {
		return res, err
	}
	log.Info("installing", "image", opts.Image, "platform", plat.String(), "reason", reason)
	if res, err = installCold(ctx, opts, ref, plat, log, prog, cur); err != nil {
		return nil, err
	}
	res.Reason, res.Changed = reason, true
	return res, nil
}

// checkOptions parses opts' image reference and platform and checks the
// pin and the runtime directory's path.
func checkOptions(opts Options) (reference.Canonical, Platform, error) {
	ref, err := ParseReference(opts.Image)
	if err != nil {
		return nil, Platform{}, err
	}
	plat, err := ParsePlatform(opts.Platform)
	if err != nil {
		return nil, Platform{}, err
	}
	if opts.PlatformDigest != "" {
		if err := opts.PlatformDigest.Validate(); err != nil {
			return nil, Platform{}, fmt.Errorf("pinned %s manifest digest: %w", plat, err)
		}
	}
	if !filepath.IsAbs(opts.RuntimeDir) {
		return nil, Platform{}, fmt.Errorf("runtime directory %q is not absolute", opts.RuntimeDir)
	}
	return ref, plat, nil
}

// checkRuntime, under the lock, makes the runtime directory and its
// releases the installing user's (fixing releases an older hbx installed
// with the image's owners, once) and checks the active release against
// opts: reason "" when it matches (cur is it; leftovers of a run killed
// after its symlink swap are cleaned), else why an install is needed
// (cur is the active release, nil when none can be read).
func checkRuntime(opts Options, ref reference.Canonical, plat Platform, log *slog.Logger) (cur *release.Installed, reason string, err error) {
	if err := ownDirs(log, opts.RuntimeDir); err != nil {
		return nil, "", fmt.Errorf("runtime directory: %w", err)
	}
	if prev, err := release.Link(opts.RuntimeDir, release.PreviousLink); err == nil {
		if err := ownRelease(prev, log); err != nil {
			log.Warn("the previous release stays unusable for a rollback until fixed", "err", err)
		}
	}
	reason = "no active release"
	cur, cerr := release.Current(opts.RuntimeDir)
	switch {
	case cerr == nil:
		if ferr := ownRelease(cur, log); ferr != nil {
			reason = ferr.Error()
		} else if reason, err = checkActive(cur, ref.Digest(), plat.String(), opts.PlatformDigest, opts.Verify); err != nil {
			return nil, "", err
		}
		if reason == "" && release.HasLeftovers(opts.RuntimeDir, opts.KeepBlobs) {
			cleanup(opts, log)
		}
		return cur, reason, nil
	case !errors.Is(cerr, release.ErrNoRelease):
		reason = cerr.Error()
	}
	return nil, reason, nil
}

// installCold runs coldInstall within the install's deadline; an
// interrupted or timed-out install says where it stopped and what stays
// active (cur).
func installCold(ctx context.Context, opts Options, ref reference.Canonical, plat Platform, log *slog.Logger, prog Progress, cur *release.Installed) (*Result, error) {
	ictx, dl, stop := withDeadline(ctx, opts.Timeout, opts.MinRate)
	defer stop()
	track := &stepTracker{Progress: prog}
	res, err := installFresh(ictx, opts, ref, plat, log, track, dl)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, stopped(ErrInterrupted, "interrupted"+track.at(), cur, opts.RuntimeDir, ctx.Err())
		case errors.Is(context.Cause(ictx), errDeadline):
			return nil, stopped(ErrTimeout, fmt.Sprintf("%s: no release after %s%s", ErrTimeout, dl, track.at()), cur, opts.RuntimeDir, context.DeadlineExceeded)
		}
		return nil, err
	}
	return res, nil
}

// checkActive returns "" when cur is the configured release and intact,
// else the reason to install.
func checkActive(cur *release.Installed, index digest.Digest, plat string, pin digest.Digest, verify bool) (string, error) {
	if err := cur.Meta.Matches(index, plat, pin); err != nil {
		return err.Error(), nil
	}
	if _, err := cur.Program(); err != nil {
		return err.Error(), nil
	}
	if !verify {
		return "", nil
	}
	if why, err := checkOwned(cur.Dir); err != nil || why != "" {
		if err != nil {
			return "", fmt.Errorf("verify active release: %w", err)
		}
		return "verify: " + why, nil
	}
	return verifyFiles(cur)
}

// verifyFiles re-hashes cur's rootfs against files.json, streaming both
// (memory stays flat whatever the number of files): "" when they agree,
// else the reason to install. A files.json that is missing or damaged is
// a reason too.
func verifyFiles(cur *release.Installed) (string, error) {
	list, err := cur.OpenFiles()
	if err != nil {
		return err.Error(), nil
	}
	defer list.Close()
	d, err := release.Verify(cur.Rootfs(), list)
	if errors.Is(err, release.ErrCorrupt) {
		return err.Error(), nil
	}
	if err != nil {
		return "", fmt.Errorf("verify active release: %w", err)
	}
	if d != "" {
		return "verify: " + d, nil
	}
	return "", nil
}

// checkKeptBlobs re-hashes the blob store's blobs (Options.Verify) and
// removes those that do not match; it returns how many of them are cur's
// (verifyKept fetches them again). Another release's damaged blob is only
// removed (logged).
func checkKeptBlobs(runtimeDir string, cur *release.Installed, log *slog.Logger) (int, error) {
	bad, err := blobCache{dir: filepath.Join(runtimeDir, release.BlobsDir)}.verifyAll()
	if err != nil {
		return 0, err
	}
	m := cur.Meta
	mine := append([]digest.Digest{m.IndexDigest, m.ManifestDigest, m.ConfigDigest}, m.Layers...)
	var own []digest.Digest
	for _, d := range bad {
		if slices.Contains(mine, d) {
			own = append(own, d)
		} else {
			log.Warn("removed a kept blob that does not hash to its digest", "digest", d)
		}
	}
	if len(own) > 0 {
		log.Warn("removed kept blobs of the active release that do not hash to their digest, to be fetched again", "blobs", len(own), "first", own[0])
	}
	return len(own), nil
}

// verdictWait is how long a failed layer waits for its blob's download to
// end, so that bytes that do not match their digest are reported as such
// rather than as whatever the extractor made of them. A variable for tests.
var verdictWait = 30 * time.Second

// reusePublished makes a release already published under releases/
// active when it is the configured one and passes the warm install's
// checks (with opts.Verify, every file re-hashed): the one previous names
// first (current and previous swap), else any other complete release left
// there (by an upgrade's staging, or a release change since). Nothing is
// fetched. With StageOnly it returns that release as the staged one. It
// returns nil, nil when no published release is usable.
func reusePublished(opts Options, index digest.Digest, plat, reason string, log *slog.Logger, prog Progress) (*Result, error) {
	rel, what := publishedMatch(opts, index, plat, log)
	if rel == nil {
		return nil, nil
	}
	m := rel.Meta.ManifestDigest
	if opts.StageOnly {
		log.Info("the release is already published", "manifest", m, "as", what)
		release.PruneBlobs(opts.RuntimeDir, opts.KeepBlobs, log)
		return &Result{Reason: "already published as the " + what, Release: rel}, nil
	}
	log.Info("reusing the "+what+" in place", "manifest", m, "reason", reason)
	prog.Event(Event{Kind: EventActivate, Digest: m})
	prog.Event(Event{Kind: EventSwap, Digest: m})
	if err := release.SwitchCurrent(opts.RuntimeDir, m.Encoded()); err != nil {
		return nil, fmt.Errorf("activate the %s %s: %w", what, m, err)
	}
	if release.HasLeftovers(opts.RuntimeDir, opts.KeepBlobs) {
		cleanup(opts, log)
	}
	cur, err := release.Current(opts.RuntimeDir)
	if err != nil {
		return nil, fmt.Errorf("read activated release: %w", err)
	}
	return &Result{Changed: true, Reason: reason + "; reused the " + what + " in place", Release: cur}, nil
}

// publishedMatch returns the first usable published release that is the
// configured one (previous first, then releases/ in name order, current
// excluded) and what it is: "previous release" or "published release".
func publishedMatch(opts Options, index digest.Digest, plat string, log *slog.Logger) (*release.Installed, string) {
	usable := func(rel *release.Installed, what string) bool {
		if err := ownRelease(rel, log); err != nil {
			log.Info("the "+what+" cannot be reused", "reason", err)
			return false
		}
		why, err := checkActive(rel, index, plat, opts.PlatformDigest, opts.Verify)
		if err != nil || why != "" {
			if why != "" && rel.Meta.Matches(index, plat, opts.PlatformDigest) == nil {
				log.Info("the "+what+" is the configured one but cannot be reused", "reason", why)
			}
			return false
		}
		return true
	}
	skip := map[string]bool{}
	for _, l := range []string{release.CurrentLink, release.PreviousLink} {
		if t, err := os.Readlink(filepath.Join(opts.RuntimeDir, l)); err == nil {
			skip[filepath.Base(t)] = true
		}
	}
	if prev, err := release.Link(opts.RuntimeDir, release.PreviousLink); err == nil && usable(prev, "previous release") {
		return prev, "previous release"
	}
	ents, _ := os.ReadDir(filepath.Join(opts.RuntimeDir, release.ReleasesDir))
	for _, e := range ents {
		if skip[e.Name()] || !e.IsDir() {
			continue
		}
		rel, err := release.Open(filepath.Join(opts.RuntimeDir, release.ReleasesDir, e.Name()))
		if err != nil || rel.Meta.Matches(index, plat, opts.PlatformDigest) != nil {
			continue // not this image: no need to check it further
		}
		if usable(rel, "published release") {
			return rel, "published release"
		}
	}
	return nil, ""
}

func newMeta(opts Options, plat Platform, r *resolved) release.Meta {
	c := r.Config.Config
	m := release.Meta{
		Format:         release.MetaFormat,
		Image:          opts.Image,
		IndexDigest:    r.IndexDigest,
		ManifestDigest: r.ManifestDigest,
		ConfigDigest:   r.ConfigDigest,
		Platform:       plat.String(),
		DiffIDs:        r.Config.RootFS.DiffIDs,
		InstalledAt:    time.Now().UTC(),
		HbxVersion:     opts.HbxVersion,
		Ownership:      release.OwnedByHbx,
		Config: release.ImageConfig{
			Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env, WorkingDir: c.WorkingDir, User: c.User,
		},
	}
	for _, l := range r.Manifest.Layers {
		m.Layers = append(m.Layers, l.Digest)
	}
	for v := range c.Volumes {
		m.Config.Volumes = append(m.Config.Volumes, v)
	}
	for p := range c.ExposedPorts {
		m.Config.ExposedPorts = append(m.Config.ExposedPorts, p)
	}
	sort.Strings(m.Config.Volumes)
	sort.Strings(m.Config.ExposedPorts)
	return m
}

// writeFileList writes the rootfs's file list as a JSON array, one entry a
// line, without holding the list in memory.
func writeFileList(w io.Writer, rootfs string, hashOf func(uint64) (string, bool)) error {
	return encodeFileList(w, func(emit func(release.File) error) error {
		return release.Walk(rootfs, hashOf, emit)
	})
}

// encodeFileList writes the entries walk emits to w as files.json: a
// JSON array, one entry a line, streamed.
func encodeFileList(w io.Writer, walk func(emit func(release.File) error) error) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	sep := "[\n"
	err := walk(func(f release.File) error {
		b, err := json.Marshal(f)
		if err != nil {
			return err
		}
		bw.WriteString(sep)
		sep = ",\n"
		_, err = bw.Write(b)
		return err
	})
	if err != nil {
		return err
	}
	if sep == "[\n" {
		bw.WriteString("[")
	}
	bw.WriteString("\n]\n")
	return bw.Flush()
}

// cleanup is release.Cleanup keeping also the releases opts.Keep names:
// errors are logged, never returned.
func cleanup(opts Options, log *slog.Logger) {
	if _, err := release.Prune(opts.RuntimeDir, opts.KeepBlobs, opts.Keep, log); err != nil {
		log.Warn("cleanup", "err", err)
	}
}
