// Package export writes the active release's image as an OCI archive
// (`hbx export`): the index, the installed platform's manifest, its config
// and its layers, bit-identical from the runtime directory's blob store,
// under the runtime directory's lock. It takes Options, never the
// configuration (internal/verbopts maps it: verbopts.Export,
// verbopts.KeptDirs).
package export

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/ociarchive"
	"github.com/hermesbox/hbx/release"
)

// Options say where the release is and how to wait for it.
type Options struct {
	RuntimeDir string        // executor.runtime_dir
	LockWait   time.Duration // how long to wait for the runtime directory's lock
	// KeepBlobs says install.keep_blobs is on: the hints for a missing
	// blob then do not ask to turn it on.
	KeepBlobs bool
	Logger    *slog.Logger // nil: no log
}

// Result is what Export wrote.
type Result struct {
	Path     string // the archive's path; "-" for the writer
	Image    string // the active release's image reference (name:tag@digest)
	Tag      string // the archive's ref.name
	Platform string
	Index    digest.Digest // the image's (top document's) digest
	Manifest digest.Digest // the installed platform's manifest
	ociarchive.Stats
}

// verifyHint is how to fetch the active release's blobs again, with or
// without the registry; verifyOneHint for one blob.
const (
	verifyHint    = "run hbx install --verify to fetch them again (or hbx install --verify --from FILE offline)"
	verifyOneHint = "run hbx install --verify to fetch it again (or hbx install --verify --from FILE offline)"
)

// keepBlobsHint says how to get back the blobs of the active release:
// verifyHint, after turning install.keep_blobs on when keep is off
// (--verify fetches kept blobs again only with it on).
func keepBlobsHint(keep bool) string { return withKeepBlobs(keep, verifyHint) }

// withKeepBlobs is hint, after turning install.keep_blobs on when keep is
// off.
func withKeepBlobs(keep bool, hint string) string {
	if keep {
		return hint
	}
	return "install.keep_blobs keeps the active release's blobs: set install.keep_blobs: true and " + hint
}

// Export writes the active release's image as an OCI archive
// (internal/ociarchive): the index, the installed platform's manifest,
// its config and its layers, bit-identical from the runtime directory's
// blob store, each re-hashed on the way. path "-" writes to stdout,
// anything else goes through ociarchive.WriteFile (durable, atomic,
// mode 0644; nothing at path on failure). It holds the runtime
// directory's lock (exclusive: an install, upgrade or backup waits up to
// its lock wait) for the whole write, so no install prunes a blob
// mid-export; over a missing runtime directory it fails and creates
// nothing. When ctx is done (Ctrl-C) it stops with ctx's error. A blob
// missing from the store (install.keep_blobs off, or removed) or one that
// fails its digest is an error naming it and how to fetch it again (hbx
// install --verify, --from FILE offline; turning install.keep_blobs on
// first only when it is off, missing or damaged).
func Export(ctx context.Context, o Options, path string, stdout io.Writer) (res *Result, err error) {
	dir := o.RuntimeDir
	cur, err := release.Current(dir)
	if err != nil {
		return nil, fmt.Errorf("read the active release: %w (run hbx install)", err)
	}
	lk, err := release.LockExisting(ctx, dir, "hbx export", o.LockWait, o.Logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		if uerr := lk.Unlock(); uerr != nil && err == nil {
			err = fmt.Errorf("release lock: %w", uerr)
		}
	}()
	// Read again under the lock: an install may have switched it.
	if cur, err = release.Current(dir); err != nil {
		return nil, fmt.Errorf("read the active release: %w (run hbx install)", err)
	}
	m := cur.Meta
	ref, err := release.ParseImageRef(m.Image)
	if err != nil {
		return nil, fmt.Errorf("active release's image: %w", err)
	}
	store := ociarchive.Dir(filepath.Join(dir, release.BlobsDir))
	keep := o.KeepBlobs
	if err := checkKept(store, m, keep); err != nil {
		return nil, err
	}
	img, err := ociarchive.StoredImage(store, ref.Tag, m.IndexDigest, m.ManifestDigest)
	if err != nil {
		return nil, blobError(err, keep)
	}
	if err := matchesRelease(img, m); err != nil {
		return nil, err
	}
	res = &Result{Path: path, Image: m.Image, Tag: ref.Tag, Platform: m.Platform, Index: m.IndexDigest, Manifest: m.ManifestDigest}
	if path == "-" {
		res.Stats, err = ociarchive.Write(ctx, stdout, img, store)
	} else {
		res.Stats, err = ociarchive.WriteFile(ctx, path, img, store)
	}
	if err != nil {
		return nil, blobError(err, keep)
	}
	return res, nil
}

// Dir is a directory hbx keeps, named by its config key.
type Dir struct{ Key, Dir string }

// CheckTarget refuses an export FILE inside one of kept (hbx's:
// executor.runtime_dir, executor.data_dir, executor.state_dir,
// backup.dir; "" entries are skipped; symlinks resolved as far as they
// exist): an export there
// would write over a kept blob, current/release.json, a lock, the
// payload's data or a backup. "-" (stdout) is fine. The error names the
// file and the directory's key.
func CheckTarget(path string, kept []Dir) error {
	if path == "-" {
		return nil
	}
	target := resolveExisting(path)
	for _, d := range kept {
		if d.Dir == "" {
			continue
		}
		dir := resolveExisting(d.Dir)
		if target == dir || strings.HasPrefix(target, dir+string(filepath.Separator)) {
			return fmt.Errorf("%s is inside %s %s: an export is written outside the directories hbx keeps", path, d.Key, d.Dir)
		}
	}
	return nil
}

// resolveExisting returns p absolute, with the symlinks of its longest
// existing prefix resolved.
func resolveExisting(p string) string {
	p, _ = filepath.Abs(p)
	var rest []string
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(append([]string{r}, rest...)...)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(append([]string{p}, rest...)...)
		}
		rest = append([]string{filepath.Base(p)}, rest...)
		p = parent
	}
}

// matchesRelease checks that the stored manifest names the config and
// layers release.json records.
func matchesRelease(img ociarchive.Image, m release.Meta) error {
	var got []digest.Digest
	for _, d := range img.Blobs {
		got = append(got, d.Digest)
	}
	want := []digest.Digest{m.IndexDigest}
	if m.ManifestDigest != m.IndexDigest {
		want = append(want, m.ManifestDigest)
	}
	want = append(append(want, m.ConfigDigest), m.Layers...)
	if !slices.Equal(got, want) {
		return fmt.Errorf("stored manifest %s names other blobs than %s records (run hbx install --verify, or hbx install --verify --from FILE offline)", m.ManifestDigest, release.MetaFile)
	}
	return nil
}

// checkKept refuses, naming the first and counting the others, the blobs
// of release m the store lacks, before anything is written; keep is
// install.keep_blobs, for the hint.
func checkKept(store ociarchive.Dir, m release.Meta, keep bool) error {
	type blob struct {
		what string
		d    digest.Digest
	}
	all := []blob{{"index", m.IndexDigest}, {"manifest", m.ManifestDigest}, {"config", m.ConfigDigest}}
	for i, l := range m.Layers {
		all = append(all, blob{fmt.Sprintf("layer %d", i+1), l})
	}
	var missing []blob
	for _, b := range all {
		rc, _, err := store.Open(b.d)
		if err == nil {
			rc.Close()
			continue
		}
		if !errors.Is(err, ociarchive.ErrMissing) {
			return err
		}
		if !slices.ContainsFunc(missing, func(x blob) bool { return x.d == b.d }) {
			missing = append(missing, b)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	more := ""
	if len(missing) > 1 {
		distinct := map[digest.Digest]bool{} // a repeated layer, the index that is the manifest: one blob
		for _, b := range all {
			distinct[b.d] = true
		}
		more = fmt.Sprintf(" (and %d more of its %d)", len(missing)-1, len(distinct))
	}
	return fmt.Errorf("the active release's %s %s is %w from the blob store %s%s; %s",
		missing[0].what, missing[0].d, ociarchive.ErrMissing, store, more, keepBlobsHint(keep))
}

// blobError adds to a missing or damaged blob's error how to get it back
// (keep: install.keep_blobs).
func blobError(err error, keep bool) error {
	switch {
	case errors.Is(err, ociarchive.ErrMissing):
		return fmt.Errorf("%w; %s", err, keepBlobsHint(keep))
	case errors.Is(err, ociarchive.ErrDigestMismatch):
		return fmt.Errorf("%w; %s", err, withKeepBlobs(keep, verifyOneHint))
	}
	return err
}
