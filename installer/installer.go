package installer

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	digest "github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/docker/reference"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/fsat"
	"github.com/hermesbox/hbx/internal/lock"
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
	Verify bool // re-hash the active release against files.json
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
	HbxVersion  string // recorded in release.json

	Logger   *slog.Logger // nil discards
	Progress Progress     // nil: no events
}

// Result says what Install did.
type Result struct {
	Changed  bool               // false: the active release already matched
	Reason   string             // why it installed, or why nothing was needed
	Release  *release.Installed // the active release afterwards
	Fetched  int                // blobs downloaded
	Reused   int                // blobs found complete in the cache
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
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	prog := opts.Progress
	if prog == nil {
		prog = nopProgress{}
	}
	ref, err := ParseReference(opts.Image)
	if err != nil {
		return nil, err
	}
	plat, err := ParsePlatform(opts.Platform)
	if err != nil {
		return nil, err
	}
	if opts.PlatformDigest != "" {
		if err := opts.PlatformDigest.Validate(); err != nil {
			return nil, fmt.Errorf("pinned %s manifest digest: %w", plat, err)
		}
	}
	if !filepath.IsAbs(opts.RuntimeDir) {
		return nil, fmt.Errorf("runtime directory %q is not absolute", opts.RuntimeDir)
	}
	if err := fsat.MkdirAll(opts.RuntimeDir, 0o755); err != nil {
		return nil, fmt.Errorf("create runtime directory: %w", err)
	}
	lk, err := lock.Acquire(ctx, filepath.Join(opts.RuntimeDir, lockFile), "hbx install", opts.LockWait, func(h lock.Holder) {
		log.Info("waiting for the install lock", "holder", h.String(), "wait", opts.LockWait)
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if uerr := lk.Unlock(); uerr != nil && err == nil {
			err = fmt.Errorf("release lock: %w", uerr)
		}
	}()

	if err := ownDirs(log, opts.RuntimeDir); err != nil {
		return nil, fmt.Errorf("runtime directory: %w", err)
	}
	// Releases installed by an hbx that applied the image's owners are
	// fixed once, in place (a marked release costs nothing here).
	if prev, err := release.Link(opts.RuntimeDir, release.PreviousLink); err == nil {
		if err := ownRelease(prev, log); err != nil {
			log.Warn("the previous release stays unusable for a rollback until fixed", "err", err)
		}
	}
	reason := "no active release"
	cur, cerr := release.Current(opts.RuntimeDir)
	if cerr == nil {
		if ferr := ownRelease(cur, log); ferr != nil {
			reason = ferr.Error()
		} else if reason, err = checkActive(cur, ref.Digest(), plat.String(), opts.PlatformDigest, opts.Verify); err != nil {
			return nil, err
		}
		if reason == "" {
			// A run killed after its symlink swap leaves its leftovers to us.
			if hasLeftovers(opts.RuntimeDir, opts.KeepBlobs) {
				cleanup(opts.RuntimeDir, opts.KeepBlobs, log)
			}
			return &Result{Reason: "active release matches", Release: cur, Duration: time.Since(start)}, nil
		}
	} else if !errors.Is(cerr, release.ErrNoRelease) {
		reason = cerr.Error()
	}
	if cerr != nil {
		cur = nil
	}
	if opts.KeepRelease && cur != nil && cur.Meta.Matches(ref.Digest(), plat.String(), opts.PlatformDigest) != nil {
		return nil, fmt.Errorf("%w: %s is active, the configuration names %s", ErrReleaseChange, cur.Meta.Image, opts.Image)
	}
	// The configured release may be the one previous names (a release
	// change back): it is complete on disk, so reuse it in place.
	if res, err := reusePrevious(opts, ref.Digest(), plat.String(), reason, log, prog); res != nil || err != nil {
		if res != nil {
			res.Duration = time.Since(start)
		}
		return res, err
	}
	log.Info("installing", "image", opts.Image, "platform", plat.String(), "reason", reason)

	ictx, dl, stop := withDeadline(ctx, opts.Timeout, opts.MinRate)
	defer stop()
	track := &stepTracker{Progress: prog}
	res, err = coldInstall(ictx, opts, ref, plat, log, track, dl)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, stopped(ErrInterrupted, "interrupted"+track.at(), cur, opts.RuntimeDir, ctx.Err())
		case errors.Is(context.Cause(ictx), errDeadline):
			return nil, stopped(ErrTimeout, fmt.Sprintf("%s: no release after %s%s", ErrTimeout, dl, track.at()), cur, opts.RuntimeDir, context.DeadlineExceeded)
		}
		return nil, err
	}
	res.Reason, res.Changed, res.Duration = reason, true, time.Since(start)
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
	want, err := cur.ReadFiles()
	if err != nil {
		return err.Error(), nil
	}
	got, err := release.Scan(cur.Rootfs(), nil)
	if err != nil {
		return "", fmt.Errorf("verify active release: %w", err)
	}
	if d := release.Diff(want, got); d != "" {
		return "verify: " + d, nil
	}
	return "", nil
}

// verdictWait is how long a failed layer waits for its blob's download to
// end, so that bytes that do not match their digest are reported as such
// rather than as whatever the extractor made of them. A variable for tests.
var verdictWait = 30 * time.Second

// reusePrevious makes the release previous names active when it is the
// configured one and passes the warm install's checks (with opts.Verify,
// every file re-hashed): current and previous swap, nothing is fetched.
// With StageOnly it returns previous as the staged release. It returns
// nil, nil when previous is not usable.
func reusePrevious(opts Options, index digest.Digest, plat, reason string, log *slog.Logger, prog Progress) (*Result, error) {
	prev, err := release.Link(opts.RuntimeDir, release.PreviousLink)
	if err != nil {
		return nil, nil
	}
	if err := ownRelease(prev, log); err != nil {
		log.Info("the previous release cannot be reused", "reason", err)
		return nil, nil
	}
	if why, err := checkActive(prev, index, plat, opts.PlatformDigest, opts.Verify); err != nil || why != "" {
		if why != "" && prev.Meta.Matches(index, plat, opts.PlatformDigest) == nil {
			log.Info("the previous release is the configured one but cannot be reused", "reason", why)
		}
		return nil, nil
	}
	m := prev.Meta.ManifestDigest
	if opts.StageOnly {
		log.Info("the release is already published as previous", "manifest", m)
		pruneBlobs(opts.RuntimeDir, opts.KeepBlobs, log)
		return &Result{Reason: "already published as the previous release", Release: prev}, nil
	}
	log.Info("reusing the previous release in place", "manifest", m, "reason", reason)
	prog.Event(Event{Kind: EventActivate, Digest: m})
	prog.Event(Event{Kind: EventSwap, Digest: m})
	if err := switchCurrent(opts.RuntimeDir, m.Encoded()); err != nil {
		return nil, fmt.Errorf("activate the previous release %s: %w", m, err)
	}
	if hasLeftovers(opts.RuntimeDir, opts.KeepBlobs) {
		cleanup(opts.RuntimeDir, opts.KeepBlobs, log)
	}
	cur, err := release.Current(opts.RuntimeDir)
	if err != nil {
		return nil, fmt.Errorf("read activated release: %w", err)
	}
	return &Result{Changed: true, Reason: reason + "; reused the previous release in place", Release: cur}, nil
}

func coldInstall(ctx context.Context, opts Options, ref reference.Canonical, plat Platform, log *slog.Logger, prog Progress, dl *deadline) (_ *Result, err error) {
	cleanupTrees(opts.RuntimeDir, log) // what a killed run left; keep its complete blobs
	defer func() {
		if err != nil { // leave complete blobs (for the next run) and the lock file, nothing else
			os.RemoveAll(filepath.Join(opts.RuntimeDir, scratchDir))
			os.Remove(filepath.Join(opts.RuntimeDir, stagingDir)) // only when empty
			// but not on the disk that just filled: the blobs go by the
			// cache's rule (all of them unless install.keep_blobs).
			if errors.Is(err, ErrNoSpace) || errors.Is(err, syscall.ENOSPC) {
				if n := pruneBlobs(opts.RuntimeDir, opts.KeepBlobs, log); n > 0 {
					err = fmt.Errorf("%w; removed %d cached blobs of no release", err, n)
				}
			}
		}
	}()
	src, err := openSource(ctx, ref, opts.Registry, filepath.Join(opts.RuntimeDir, scratchDir), log)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	r, err := resolve(ctx, src, ref.Digest(), plat, opts.PlatformDigest)
	if err != nil {
		return nil, err
	}
	res := &Result{}
	cache := blobCache{dir: filepath.Join(opts.RuntimeDir, blobsDir)}
	layers := r.Manifest.Layers
	size := r.Manifest.Config.Size
	for _, l := range layers {
		size += l.Size
	}
	dl.scale(size)
	if err := checkSpace(opts.RuntimeDir, cache, layers); err != nil {
		return nil, err
	}

	hexd := r.ManifestDigest.Encoded()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	staged := filepath.Join(opts.RuntimeDir, stagingDir, hexd+"-"+hex.EncodeToString(rnd[:]))
	rootfs := filepath.Join(staged, release.RootfsDir)
	if err := fsat.MkdirAll(rootfs, 0o755); err != nil {
		return nil, fmt.Errorf("create staging directory: %w", err)
	}
	published := false
	defer func() {
		if !published {
			os.RemoveAll(staged)
		}
	}()
	// Whatever the umask: the release directory becomes releases/<hex>.
	if err := ownDirs(log, filepath.Dir(staged), staged, rootfs); err != nil {
		return nil, fmt.Errorf("staging directory: %w", err)
	}
	for _, d := range []string{staged, rootfs} {
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, fmt.Errorf("staging directory: %w", err)
		}
	}
	// The image's owners are never applied: every entry is the installing
	// user's (root), with modes per extract.RuntimeMode.
	a, err := extract.New(rootfs, extract.Options{
		MaxBytes:     opts.MaxUncompressedBytes,
		RuntimeModes: true,
		HashFiles:    true,
		Logger:       log,
	})
	if err != nil {
		return nil, err
	}
	defer a.Close()

	// Write back what is applied while extraction goes on (kicked with each
	// progress report), so the final syncfs has little left to do.
	flusher := atomicfile.NewFlusher(staged)
	defer flusher.Wait()

	// Fetch ahead of extraction, and extract while fetching: each layer is
	// applied as its blob arrives (following the cache file being
	// written), and the next blob downloads while this layer finishes.
	// The fetcher is stopped and waited for before Install returns, so it
	// never writes into the cache after the lock is released.
	fetchCtx, stopFetch := context.WithCancel(ctx)
	fetchDone := make(chan struct{})
	// Deferred calls run in reverse: the feeds are closed (ending any read
	// blocked on them), then the read-ahead is waited for, so no goroutine
	// of this install reports progress or kicks the flusher after it.
	unpack := newUnpacker()
	defer unpack.close()
	feeds := make([]*feed, len(layers))
	for i := range feeds {
		feeds[i] = newFeed()
	}
	defer func() {
		stopFetch()
		<-fetchDone
		for _, fd := range feeds {
			fd.close()
		}
	}()
	go func() {
		defer close(fetchDone)
		for i, l := range layers {
			prog.Event(Event{Kind: EventBlobStart, Digest: l.Digest, Size: l.Size, Index: i, Count: len(layers)})
			if err := cache.fetch(fetchCtx, src, l, feeds[i]); err != nil {
				for _, fd := range feeds[i+1:] {
					fd.finish(false, errFeedAbandoned)
				}
				return
			}
			log.Info("blob ready", "digest", l.Digest, "size", l.Size, "fetched", feeds[i].fetched)
			prog.Event(Event{Kind: EventBlobDone, Digest: l.Digest, Size: l.Size, Index: i, Count: len(layers)})
		}
	}()
	for i, l := range layers {
		layerStart := time.Now()
		prog.Event(Event{Kind: EventLayerStart, Digest: l.Digest, Size: l.Size, Index: i, Count: len(layers)})
		report := func(done int64) {
			flusher.Kick()
			prog.Event(Event{Kind: EventLayerProgress, Digest: l.Digest, Size: l.Size, Done: done, Index: i, Count: len(layers)})
		}
		err := unpack.apply(ctx, cache, a, feeds[i], l, r.Config.RootFS.DiffIDs[i], report)
		if err != nil && ctx.Err() == nil {
			// Extraction may have failed on bytes the download is about
			// to refuse: let it finish, for a while, so that a lying
			// registry is reported as such.
			wctx, cancel := context.WithTimeout(ctx, verdictWait)
			if werr := feeds[i].wait(wctx); errors.Is(werr, context.DeadlineExceeded) {
				err = fmt.Errorf("%w (the blob's download had not finished %s later, so its digest is unchecked)", err, verdictWait)
			}
			cancel()
		}
		if ferr := feeds[i].failure(); ferr != nil && !errors.Is(ferr, errFeedAbandoned) {
			// The download's failure is the cause, whatever extraction
			// made of the bytes it got.
			return nil, fmt.Errorf("fetch layer %s from %s: %w", l.Digest, reference.Domain(ref), ferr)
		}
		if err != nil {
			return nil, fmt.Errorf("extract layer %s: %w", l.Digest, noSpace(err, staged))
		}
		if feeds[i].fetched {
			res.Fetched++
		} else {
			res.Reused++
		}
		log.Info("layer applied", "digest", l.Digest, "index", i, "took", time.Since(layerStart).Round(time.Millisecond))
		prog.Event(Event{Kind: EventLayerDone, Digest: l.Digest, Size: l.Size, Done: l.Size, Index: i, Count: len(layers)})
		feeds[i].close()
	}
	if n := len(a.Stats().DroppedSetid); n > 0 {
		log.Warn("dropped setuid/setgid bits", "entries", n, "first", a.Stats().DroppedSetid[0])
	}

	// files.json is streamed, one entry per line: memory stays flat
	// whatever the number of files.
	if err := atomicfile.Write(filepath.Join(staged, release.FilesFile), 0o644, func(w io.Writer) error {
		return writeFileList(w, rootfs, a.FileHash)
	}); err != nil {
		return nil, err
	}
	meta := newMeta(opts, plat, r)
	mb, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", release.MetaFile, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(staged, release.MetaFile), append(mb, '\n'), 0o644); err != nil {
		return nil, err
	}
	// The manifest and config as fetched, so `hbx health --deep` can
	// re-hash them once the blob cache is gone.
	for name, b := range map[string][]byte{release.ManifestFile: r.ManifestBytes, release.ConfigFile: r.ConfigBytes} {
		if err := atomicfile.WriteFile(filepath.Join(staged, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	inst, err := release.Open(staged)
	if err != nil {
		return nil, err
	}
	if err = validate(ctx, inst, plat, opts); err != nil {
		return nil, fmt.Errorf("validate release: %w", err)
	}
	if err := release.CheckArgs(inst); err != nil { // path arguments map into the release, data or state dir
		return nil, fmt.Errorf("validate release: %w", err)
	}
	if err := ctx.Err(); err != nil { // interrupted: publish nothing
		return nil, err
	}
	flusher.Wait()
	syncStart := time.Now()
	if err := atomicfile.SyncFS(staged); err != nil {
		return nil, err
	}
	log.Info("release durable", "took", time.Since(syncStart).Round(time.Millisecond))
	prog.Event(Event{Kind: EventActivate, Digest: r.ManifestDigest})
	if err := activate(opts.RuntimeDir, staged, hexd, log, prog, r.ManifestDigest, opts.StageOnly); err != nil {
		return nil, fmt.Errorf("activate: %w", err)
	}
	published = true
	if opts.StageOnly {
		log.Info("staged", "manifest", r.ManifestDigest, "entries", a.Stats().Entries, "bytes", a.Stats().Bytes)
		// The release is complete on disk: its blobs are not needed any
		// more (an upgrade activates it later with Activate, which does
		// not clean).
		pruneBlobs(opts.RuntimeDir, opts.KeepBlobs, log)
		if res.Release, err = release.Open(filepath.Join(opts.RuntimeDir, release.ReleasesDir, hexd)); err != nil {
			return nil, fmt.Errorf("read staged release: %w", err)
		}
		return res, nil
	}
	log.Info("activated", "manifest", r.ManifestDigest, "entries", a.Stats().Entries, "bytes", a.Stats().Bytes)
	cleanup(opts.RuntimeDir, opts.KeepBlobs, log)
	if res.Release, err = release.Current(opts.RuntimeDir); err != nil {
		return nil, fmt.Errorf("read activated release: %w", err)
	}
	return res, nil
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
	bw := bufio.NewWriterSize(w, 64<<10)
	sep := "[\n"
	err := release.Walk(rootfs, hashOf, func(f release.File) error {
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
