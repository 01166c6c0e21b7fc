package installer

import (
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
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/types"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/fsat"
	"github.com/hermesbox/hbx/release"
)

// cold is one cold install, shared by its steps.
type cold struct {
	opts    Options
	ref     reference.Canonical
	plat    Platform
	log     *slog.Logger
	prog    Progress
	src     types.ImageSource // the registry (*remote) or Options.From (*localSource)
	r       *resolved
	cache   blobCache
	staged  string // staging/<manifest hex>-<random>
	rootfs  string // staged/rootfs
	a       *extract.Applier
	flusher *atomicfile.Flusher
	unpack  *unpacker
	feeds   []*feed // one per layer, fed by the fetcher
	got     *downloads
	res     Result
	from    int            // first layer to apply: those before come from a layer source (seedStaging)
	seed    *layerSource   // that source, nil when every layer is applied
	states  []*stagedState // layer states to publish once the release is durable
	listing sync.WaitGroup // listStates' writers of the states' files.json
}

// installFresh runs coldInstall, and runs it again when a layer blob
// reused from the store turned out damaged as it was read: that run has
// removed the blob and its staging tree (nothing read from the blob was
// published), so the next one fetches it. Each retry is for a blob not
// retried before, so there are at most as many as the image has layers.
func installFresh(ctx context.Context, opts Options, ref reference.Canonical, plat Platform, log *slog.Logger, prog Progress, dl *deadline) (*Result, error) {
	var dropped []digest.Digest
	got := &downloads{}
	for {
		res, err := coldInstall(ctx, opts, ref, plat, log, prog, dl, got)
		var sb *storedBlobError
		if !errors.As(err, &sb) || slices.Contains(dropped, sb.digest) || ctx.Err() != nil {
			return res, err
		}
		dropped = append(dropped, sb.digest)
		log.Warn("a stored blob does not hash to its digest: removed; installing again, fetching it", "digest", sb.digest, "err", err)
	}
}

// downloads are the layer blobs an install downloaded, over all its runs:
// a layer is counted as fetched (Result.Fetched) when its blob was
// downloaded by any of them, though a later run found it in the store.
type downloads struct {
	mu sync.Mutex
	d  []digest.Digest
}

func (d *downloads) add(x digest.Digest) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.d = append(d.d, x)
}

func (d *downloads) has(x digest.Digest) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Contains(d.d, x)
}

// coldInstall fetches, applies, records, validates and publishes the
// release ref names for plat. Crash windows, step by step: until
// activate's rename nothing visible changes (a killed run leaves staging/
// and tmp/, removed by the next install, and complete blobs, reused);
// activate says what its renames leave. On failure the staging tree and
// tmp/ go, complete blobs stay (pruned by the cache's rule on a full disk).
func coldInstall(ctx context.Context, opts Options, ref reference.Canonical, plat Platform, log *slog.Logger, prog Progress, dl *deadline, got *downloads) (_ *Result, err error) {
	c := &cold{opts: opts, ref: ref, plat: plat, log: log, prog: prog, cache: blobCache{dir: filepath.Join(opts.RuntimeDir, release.BlobsDir)}, got: got}
	release.CleanupLeftovers(opts.RuntimeDir, log) // what a killed run left; blobs and releases stay
	defer func() { err = c.failed(err) }()
	if c.src, err = c.open(ctx); err != nil {
		return nil, err
	}
	defer c.src.Close()
	if rm, ok := c.src.(*remote); ok {
		c.res.Location = rm.location
	}
	if c.r, err = resolve(ctx, c.src, ref.Digest(), plat, opts.PlatformDigest); err != nil {
		return nil, err
	}
	if err := c.storeMetadata(); err != nil {
		return nil, err
	}
	if err := c.checkSpace(dl); err != nil {
		return nil, err
	}
	if err := c.makeStaging(); err != nil {
		return nil, err
	}
	published := false
	defer func() {
		if !published {
			os.RemoveAll(c.staged)
		}
	}()
	if err := c.newApplier(); err != nil {
		return nil, err
	}
	defer func() { c.a.Close() }() // seedStaging may replace c.a
	defer c.listing.Wait()         // the states' listings read c.a's hashes
	// Write back what is applied while extraction goes on (kicked with each
	// progress report), so the final syncfs has little left to do.
	c.flusher = atomicfile.NewFlusher(c.staged)
	defer c.flusher.Wait()
	// Deferred calls run in reverse: the fetcher is stopped and the feeds
	// closed (ending any read blocked on them), then the read-ahead is
	// waited for, so no goroutine of this install reports progress, kicks
	// the flusher or writes into the cache after it.
	c.unpack = newUnpacker()
	defer c.unpack.close()
	defer c.startFetch(ctx)()
	if err := c.applyLayers(ctx); err != nil {
		return nil, err
	}
	c.listStates() // beside the release's own listing: two walks, two CPUs
	if err := c.writeRecords(); err != nil {
		return nil, err
	}
	if err := c.validate(ctx); err != nil {
		return nil, err
	}
	if err := c.makeDurable(); err != nil {
		return nil, err
	}
	c.prog.Event(Event{Kind: EventActivate, Digest: c.r.ManifestDigest})
	if err := activate(opts.RuntimeDir, c.staged, c.r.ManifestDigest.Encoded(), log, prog, c.r.ManifestDigest, opts.StageOnly); err != nil {
		return nil, fmt.Errorf("activate: %w", err)
	}
	published = true
	return c.finish()
}

// failed cleans up after a failed cold install (err): it leaves complete
// blobs (for the next run) and the lock file, nothing else, but not on
// the disk that just filled: the blobs go by the cache's rule (all of
// them unless install.keep_blobs). It returns err, naming the local image
// it read and noting removed blobs.
func (c *cold) failed(err error) error {
	if err == nil {
		return nil
	}
	// Once open, every error names the local image (openLocal's do).
	if l, ok := c.src.(*localSource); ok {
		err = fmt.Errorf("%s: %w", l.name, err)
	}
	os.RemoveAll(filepath.Join(c.opts.RuntimeDir, release.ScratchDir))
	for _, s := range c.states {
		os.RemoveAll(s.dir)
	}
	os.Remove(filepath.Join(c.opts.RuntimeDir, release.StagingDir)) // only when empty
	if errors.Is(err, ErrNoSpace) || errors.Is(err, syscall.ENOSPC) {
		if n, _ := release.PruneBlobs(c.opts.RuntimeDir, c.opts.KeepBlobs, c.log); n > 0 {
			err = fmt.Errorf("%w; removed %d cached blobs of no release", err, n)
		}
	}
	return err
}

// open opens the image's source: Options.From when set (no network),
// else the registry.
func (c *cold) open(ctx context.Context) (types.ImageSource, error) {
	return openImage(ctx, c.opts, c.ref, c.log)
}

// openImage opens the source of the image ref names: opts.From when set
// (no network, read in place), else the registry (its scratch files under
// <RuntimeDir>/tmp).
func openImage(ctx context.Context, opts Options, ref reference.Canonical, log *slog.Logger) (types.ImageSource, error) {
	scratch := filepath.Join(opts.RuntimeDir, release.ScratchDir)
	if opts.From != "" {
		l, err := openLocal(opts.From, ref.Digest())
		if ne := (*noIndexError)(nil); errors.As(err, &ne) {
			ne.wanted = opts.Wanted
			if t, ok := ref.(reference.NamedTagged); ok {
				ne.tag = t.Tag()
			}
			err = fmt.Errorf("%s: %w: %w", ne.name, ErrLocalImage, ne)
		}
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	r, err := openRegistry(ctx, ref, opts.Registry, scratch, log)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// openRegistry opens ref at the first of its locations
// (release.Locations over opts.Mirrors: the mirrors in order, the image's
// own name last) whose registry serves the index ref's digest names, the
// digest checked here: a location that fails (down, lacks the image,
// refuses) or serves other bytes is logged and the next is tried. The
// error, when none answers, is the last location's, naming the others'.
func openRegistry(ctx context.Context, ref reference.Canonical, opts RegistryOptions, scratch string, log *slog.Logger) (*remote, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	names := release.Locations(ref.Name(), opts.Mirrors)
	var tried []string
	for i, name := range names {
		r, err := openAt(ctx, ref, name, len(names) > 1, opts, scratch, log)
		if err == nil {
			if len(names) > 1 {
				log.Info("image location answered", "location", name, "image", ref.Name(), "tried", len(tried)+1, "of", len(names))
			}
			return r, nil
		}
		if ctx.Err() != nil || i == len(names)-1 {
			if len(tried) > 0 {
				return nil, fmt.Errorf("%w (tried before: %s)", err, strings.Join(tried, "; "))
			}
			return nil, err
		}
		log.Warn("image location did not answer; trying the next", "location", name, "next", names[i+1], "err", err)
		tried = append(tried, name+": "+err.Error())
	}
	return nil, errors.New("no location to fetch from") // Locations returns at least the name
}

// openAt opens ref's tag and digest at the repository name and, with
// check (another location may answer instead), checks the index it
// serves against ref's digest; resolve checks it anyway.
func openAt(ctx context.Context, ref reference.Canonical, name string, check bool, opts RegistryOptions, scratch string, log *slog.Logger) (*remote, error) {
	loc := ref
	if name != ref.Name() {
		n, err := reference.ParseNormalizedNamed(name)
		if err != nil {
			return nil, fmt.Errorf("mirror location %q: %w", name, err)
		}
		if t, ok := ref.(reference.NamedTagged); ok {
			if n, err = reference.WithTag(n, t.Tag()); err != nil {
				return nil, fmt.Errorf("mirror location %q: %w", name, err)
			}
		}
		if loc, err = reference.WithDigest(n, ref.Digest()); err != nil {
			return nil, fmt.Errorf("mirror location %q: %w", name, err)
		}
	}
	r, err := openSource(ctx, loc, opts, scratch, log)
	if err != nil {
		return nil, err
	}
	if err := checkDigest("index from "+name, r.index, ref.Digest()); check && err != nil {
		r.Close()
		return nil, err
	}
	r.location = name
	return r, nil
}

// storeMetadata keeps the index, manifest and config bytes as fetched
// (resolve checked each against its digest) in the blob store beside the
// layers, so the store holds the whole image of the installed platform.
func (c *cold) storeMetadata() error {
	for _, b := range []struct {
		d digest.Digest
		b []byte
	}{{c.r.IndexDigest, c.r.IndexBytes}, {c.r.ManifestDigest, c.r.ManifestBytes}, {c.r.ConfigDigest, c.r.ConfigBytes}} {
		if err := c.cache.put(b.d, b.b); err != nil {
			return err
		}
	}
	return nil
}

// checkSpace scales the deadline to the image's size and refuses an image
// the runtime directory's file system cannot hold.
func (c *cold) checkSpace(dl *deadline) error {
	size := c.r.Manifest.Config.Size
	for _, l := range c.r.Manifest.Layers {
		size += l.Size
	}
	dl.scale(size)
	return checkSpace(c.opts.RuntimeDir, c.cache, c.r.Manifest.Layers)
}

// makeStaging creates the staging tree, mode 0755 and the installing
// user's whatever the umask: it becomes releases/<hex>.
func (c *cold) makeStaging() error {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	c.staged = filepath.Join(c.opts.RuntimeDir, release.StagingDir, c.r.ManifestDigest.Encoded()+"-"+hex.EncodeToString(rnd[:]))
	c.rootfs = filepath.Join(c.staged, release.RootfsDir)
	if err := fsat.MkdirAll(c.rootfs, 0o755); err != nil {
		return fmt.Errorf("create staging directory: %w", err)
	}
	if err := ownDirs(c.log, filepath.Dir(c.staged), c.staged, c.rootfs); err != nil {
		return fmt.Errorf("staging directory: %w", err)
	}
	for _, d := range []string{c.staged, c.rootfs} {
		if err := os.Chmod(d, 0o755); err != nil {
			return fmt.Errorf("staging directory: %w", err)
		}
	}
	return nil
}

// newApplier opens the layer applier on the staged rootfs and starts the
// rootfs from a layer source when one holds the image's first layers
// (seedStaging).
func (c *cold) newApplier() error {
	if err := c.openApplier(); err != nil {
		return err
	}
	if err := c.seedStaging(); err != nil {
		if c.a != nil {
			c.a.Close()
		}
		return err
	}
	return nil
}

// openApplier opens the layer applier on the staged rootfs. The image's
// owners are never applied: every entry is the installing user's (root),
// with modes per extract.RuntimeMode.
func (c *cold) openApplier() (err error) {
	c.a, err = extract.New(c.rootfs, extract.Options{
		MaxBytes:     c.opts.MaxUncompressedBytes,
		RuntimeModes: true,
		HashFiles:    true,
		SpillDir:     c.staged, // beside rootfs: hashes and layer names spill there, memory stays flat
		Logger:       c.log,
	})
	return err
}

// startFetch fetches ahead of extraction, and extraction goes on while
// fetching: each layer is applied as its blob arrives (following the cache
// file being written), and the next blob downloads while this layer
// finishes. The returned stop cancels the fetcher, waits for it and
// closes every feed: after it, the fetcher never writes into the cache.
func (c *cold) startFetch(ctx context.Context) (stop func()) {
	layers := c.r.Manifest.Layers
	fetchCtx, stopFetch := context.WithCancel(ctx)
	fetchDone := make(chan struct{})
	c.feeds = make([]*feed, len(layers))
	for i := range c.feeds {
		c.feeds[i] = newFeed()
	}
	go func() {
		defer close(fetchDone)
		for i, l := range layers {
			if i < c.from {
				continue // its state was linked in: not read
			}
			c.prog.Event(Event{Kind: EventBlobStart, Digest: l.Digest, Size: l.Size, Index: i, Count: len(layers)})
			if err := c.cache.fetch(fetchCtx, c.src, l, c.feeds[i]); err != nil {
				for _, fd := range c.feeds[i+1:] {
					fd.finish(false, errFeedAbandoned)
				}
				return
			}
			if !c.feeds[i].downloaded() {
				continue // found in the store: done once its layer has read and verified it
			}
			c.got.add(l.Digest)
			c.log.Info("blob ready", "digest", l.Digest, "size", l.Size, "fetched", true)
			c.prog.Event(Event{Kind: EventBlobDone, Digest: l.Digest, Size: l.Size, Index: i, Count: len(layers)})
		}
	}()
	return func() {
		stopFetch()
		<-fetchDone
		for _, fd := range c.feeds {
			fd.close()
		}
	}
}

// applyLayers applies every layer from c.from in order, each from its
// feed; the layers before c.from count as reused. The state before the
// last layer is kept (keepState) when this install made it.
func (c *cold) applyLayers(ctx context.Context) error {
	layers := c.r.Manifest.Layers
	for _, l := range layers[:c.from] {
		c.res.Reused++
		c.res.ReusedBytes += l.Size
	}
	for i := c.from; i < len(layers); i++ {
		if i == len(layers)-1 && i > c.from {
			c.keepState(i)
		}
		if err := c.applyLayer(ctx, i); err != nil {
			return err
		}
	}
	if n := len(c.a.Stats().DroppedSetid); n > 0 {
		c.log.Warn("dropped setuid/setgid bits", "entries", n, "first", c.a.Stats().DroppedSetid[0])
	}
	return nil
}

// applyLayer applies layer i and checks its diff_id. A failed download is
// the cause whatever extraction made of the bytes it got.
func (c *cold) applyLayer(ctx context.Context, i int) error {
	layers := c.r.Manifest.Layers
	l, fd := layers[i], c.feeds[i]
	layerStart := time.Now()
	c.prog.Event(Event{Kind: EventLayerStart, Digest: l.Digest, Size: l.Size, Index: i, Count: len(layers)})
	err := c.unpack.apply(ctx, c.cache, c.a, *c.layerJob(i), c.layerJob(i+1))
	if err != nil && ctx.Err() == nil {
		err = c.verdict(ctx, fd, l, err)
	}
	var sb *storedBlobError
	if ferr := fd.failure(); errors.As(ferr, &sb) {
		c.cache.drop(l.Digest)
		return fmt.Errorf("reuse layer %s: %w", l.Digest, ferr)
	} else if ferr != nil && !errors.Is(ferr, errFeedAbandoned) {
		return fmt.Errorf("fetch layer %s from %s: %w", l.Digest, registryHost(c.src), ferr)
	}
	if err != nil {
		return fmt.Errorf("extract layer %s: %w", l.Digest, noSpace(err, c.staged))
	}
	if !fd.fetched {
		c.log.Info("blob ready", "digest", l.Digest, "size", l.Size, "fetched", false)
		c.prog.Event(Event{Kind: EventBlobDone, Digest: l.Digest, Size: l.Size, Index: i, Count: len(layers)})
	}
	if fd.fetched || c.got.has(l.Digest) {
		c.res.Fetched++
		c.res.FetchedBytes += l.Size
	} else {
		c.res.Reused++
		c.res.ReusedBytes += l.Size
	}
	c.log.Info("layer applied", "digest", l.Digest, "index", i, "took", time.Since(layerStart).Round(time.Millisecond))
	c.prog.Event(Event{Kind: EventLayerDone, Digest: l.Digest, Size: l.Size, Done: l.Size, Index: i, Count: len(layers)})
	fd.close()
	return nil
}

// verdict settles, after extraction failed with err, whether the layer's
// blob was sound, so that bytes that do not match their digest are
// reported as such rather than as whatever the extractor made of them. A
// download is let finish, for a while; a stored blob whose reader stopped
// before its end is hashed here (a damaged one then fails fd with a
// *storedBlobError). It returns err, noting a digest left unchecked.
func (c *cold) verdict(ctx context.Context, fd *feed, l v1.Descriptor, err error) error {
	if stored, done := fd.state(); stored != "" {
		if !done && errors.Is(c.cache.check(stored), ErrDigestMismatch) {
			fd.finish(false, &storedBlobError{digest: stored, err: fmt.Errorf("%w: content does not hash to its name", ErrDigestMismatch)})
		}
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, verdictWait)
	defer cancel()
	if werr := fd.wait(wctx); errors.Is(werr, context.DeadlineExceeded) {
		return fmt.Errorf("%w (the blob's download had not finished %s later, so its digest is unchecked)", err, verdictWait)
	}
	return err
}

// writeRecords writes the staged release's records: files.json (streamed,
// one entry per line: memory stays flat whatever the number of files),
// release.json, and the manifest and config as fetched, so `hbx health
// --deep` can re-hash them once the blob cache is gone.
func (c *cold) writeRecords() error {
	start := time.Now()
	var kept, looked int
	if err := atomicfile.Write(filepath.Join(c.staged, release.FilesFile), 0o644, func(w io.Writer) error {
		var err error
		kept, looked, err = c.writeFiles(w)
		return err
	}); err != nil {
		return err
	}
	c.log.Info("release listed", "entries", kept+looked, "from the layer source", kept, "took", time.Since(start).Round(time.Millisecond))
	mb, err := json.MarshalIndent(newMeta(c.opts, c.plat, c.r), "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", release.MetaFile, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(c.staged, release.MetaFile), append(mb, '\n'), 0o644); err != nil {
		return err
	}
	for name, b := range map[string][]byte{release.ManifestFile: c.r.ManifestBytes, release.ConfigFile: c.r.ConfigBytes} {
		if err := atomicfile.WriteFile(filepath.Join(c.staged, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeFiles writes the staged release's files.json to w: derived from
// its layer source's files.json and the directories the layers applied
// over it changed (release.WalkChanged) when it was seeded and the
// applier kept track, else by a walk of the whole tree. It returns how
// many entries came from the source's list and how many were looked at.
func (c *cold) writeFiles(w io.Writer) (kept, looked int, err error) {
	if _, all := c.a.Changed(""); c.seed == nil || !all {
		err = encodeFileList(w, func(emit func(release.File) error) error {
			return release.Walk(c.rootfs, c.a.FileHash, func(f release.File) error {
				looked++
				return emit(f)
			})
		})
		return 0, looked, err
	}
	old, err := (&release.Installed{Dir: c.seed.dir}).OpenFiles()
	if err != nil {
		return 0, 0, err
	}
	defer old.Close()
	changed := func(dir string) bool {
		ch, _ := c.a.Changed(dir)
		return ch
	}
	var st release.DeriveStats
	err = encodeFileList(w, func(emit func(release.File) error) error {
		st, err = release.WalkChanged(c.rootfs, old, changed, c.a.FileHash, emit)
		return err
	})
	return st.Kept, st.Looked, err
}

// validate checks the staged release (its program, the smoke command,
// path arguments mapping into the release, data or state directory) and
// that the install was not interrupted: then nothing is published.
func (c *cold) validate(ctx context.Context) error {
	inst, err := release.Open(c.staged)
	if err != nil {
		return err
	}
	if err = validate(ctx, inst, c.plat, c.opts); err != nil {
		return fmt.Errorf("validate release: %w", err)
	}
	if err := release.CheckArgs(inst); err != nil {
		return fmt.Errorf("validate release: %w", err)
	}
	return ctx.Err()
}

// makeDurable writes the staged tree back to disk (syncfs) before it is
// published, then publishes the layer states it made durable too.
func (c *cold) makeDurable() error {
	c.flusher.Wait()
	syncStart := time.Now()
	if err := atomicfile.SyncFS(c.staged); err != nil {
		return err
	}
	c.log.Info("release durable", "took", time.Since(syncStart).Round(time.Millisecond))
	c.publishStates()
	return nil
}

// finish returns the published release: with StageOnly the staged one
// (its blobs pruned: an upgrade activates it later with Activate, which
// does not clean), else the active one, after cleanup.
func (c *cold) finish() (*Result, error) {
	hexd, stats := c.r.ManifestDigest.Encoded(), c.a.Stats()
	res := c.res
	var err error
	if c.opts.StageOnly {
		c.log.Info("staged", "manifest", c.r.ManifestDigest, "entries", stats.Entries, "bytes", stats.Bytes,
			"fetched_bytes", res.FetchedBytes, "reused_bytes", res.ReusedBytes)
		release.PruneBlobs(c.opts.RuntimeDir, c.opts.KeepBlobs, c.log)
		if res.Release, err = release.Open(filepath.Join(c.opts.RuntimeDir, release.ReleasesDir, hexd)); err != nil {
			return nil, fmt.Errorf("read staged release: %w", err)
		}
		return &res, nil
	}
	c.log.Info("activated", "manifest", c.r.ManifestDigest, "entries", stats.Entries, "bytes", stats.Bytes,
		"fetched_bytes", res.FetchedBytes, "reused_bytes", res.ReusedBytes)
	cleanup(c.opts, c.log)
	if res.Release, err = release.Current(c.opts.RuntimeDir); err != nil {
		return nil, fmt.Errorf("read activated release: %w", err)
	}
	return &res, nil
}
