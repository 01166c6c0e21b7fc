package installer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/types"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/regfile"
)

// blobCache is a content-addressed store of complete, verified blobs:
// <dir>/sha256/<hex>. A blob appears under its name only by rename after
// its bytes were hashed, so a name present means a blob that was complete;
// a blob is hashed again as it is reused (a name is not proof against a
// power loss or a disk that rots): its feed's reader hashes the bytes it
// hands to extraction, and one that no longer matches fails its layer, is
// removed, and the install runs again fetching it (installFresh).
type blobCache struct {
	dir string
}

// path names the blob; d must already be validated.
func (c blobCache) path(d digest.Digest) string {
	return filepath.Join(c.dir, string(d.Algorithm()), d.Encoded())
}

// has reports whether the store has a regular file (not a symlink) of
// size bytes (any size when size <= 0) named d.
func (c blobCache) has(d digest.Digest, size int64) bool {
	st, err := os.Lstat(c.path(d))
	return err == nil && st.Mode().IsRegular() && (size <= 0 || st.Size() == size)
}

// fetch copies the blob from src into the cache unless it is there, checking
// its size and digest, and finishes fd with the outcome: fd's reader can
// follow the bytes while they arrive. Transient failures are src's to
// retry (a *remote does, resuming the stream); bytes that do not match are
// refused with ErrDigestMismatch and never stored. A blob of the right
// size already in the cache is handed to fd unread (openStored): fd's
// reader verifies it and finishes fd.
func (c blobCache) fetch(ctx context.Context, src types.ImageSource, desc v1.Descriptor, fd *feed) (err error) {
	fetched, reused := false, false
	defer func() {
		if !reused {
			fd.finish(fetched, err)
		}
	}()
	if err := desc.Digest.Validate(); err != nil {
		return fmt.Errorf("blob digest %q: %w", desc.Digest, err)
	}
	if c.has(desc.Digest, desc.Size) {
		f, err := c.open(desc.Digest)
		switch {
		case err == nil:
			fd.openStored(f, desc.Size, desc.Digest)
			reused = true
			return nil
		case !errors.Is(err, ErrDigestMismatch):
			return fmt.Errorf("open stored blob %s: %w", desc.Digest, err) // unreadable, not damaged: say so rather than refetch it
		}
	}
	// Damaged on disk, of another size, or not a regular file (a symlink,
	// FIFO, directory): whatever holds the name goes, and the blob is
	// fetched again.
	c.drop(desc.Digest)
	dir := filepath.Dir(c.path(desc.Digest))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create blob cache: %w", err)
	}
	if err := c.download(ctx, src, desc, fd); err != nil {
		return err
	}
	fetched = true
	return nil
}

// download streams the blob into a temporary file beside its final name,
// hashing it and telling fd of every write, and renames it into place only
// when size and digest match.
func (c blobCache) download(ctx context.Context, src types.ImageSource, desc v1.Descriptor, fd *feed) (err error) {
	rc, _, err := src.GetBlob(ctx, types.BlobInfo{Digest: desc.Digest, Size: desc.Size}, none.NoCache)
	if err != nil {
		return err
	}
	defer rc.Close()
	final := c.path(desc.Digest)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(final), atomicfile.TempPrefix+desc.Digest.Encoded()+"-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	rf, err := os.Open(tmp)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	fd.open(rf, 0)
	v := desc.Digest.Verifier()
	// Read one byte past the declared size to catch a registry that sends more.
	n, err := io.CopyBuffer(&feedWriter{w: io.MultiWriter(f, v), fd: fd}, io.LimitReader(rc, desc.Size+1), make([]byte, 256<<10))
	if err != nil {
		return err // the registry's failure after its retries, or the write's, naming the file
	}
	if n != desc.Size {
		return fmt.Errorf("%w: got %d bytes, manifest says %d", ErrDigestMismatch, n, desc.Size)
	}
	if !v.Verified() {
		return fmt.Errorf("%w: content does not hash to %s", ErrDigestMismatch, desc.Digest)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// feedWriter tells a feed of each write that reached the blob file.
type feedWriter struct {
	w  io.Writer
	fd *feed
}

func (w *feedWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if n > 0 {
		w.fd.grow(n)
	}
	return n, err
}

// open opens a stored blob without following a symlink or blocking on a
// FIFO: anything but a regular file at its name wraps ErrDigestMismatch
// (a damaged blob, removed and fetched again).
func (c blobCache) open(d digest.Digest) (*os.File, error) {
	f, err := regfile.OpenNoFollow(c.path(d))
	if errors.Is(err, regfile.ErrNotRegular) {
		return nil, fmt.Errorf("%w: %w", ErrDigestMismatch, err)
	}
	return f, err
}

// drop removes what holds the name of a blob found to be bad (a file, a
// symlink, never what it points to, or a directory).
func (c blobCache) drop(d digest.Digest) { os.RemoveAll(c.path(d)) }

// check re-hashes the stored blob d (hbx install --verify, and a reused
// layer that failed before its feed's reader reached the blob's end); the
// error wraps ErrDigestMismatch when its bytes no longer hash to d.
func (c blobCache) check(d digest.Digest) error {
	f, err := c.open(d)
	if err != nil {
		return fmt.Errorf("open stored blob %s: %w", d, err)
	}
	defer f.Close()
	v := d.Verifier()
	if _, err := io.CopyBuffer(v, f, make([]byte, 256<<10)); err != nil {
		return fmt.Errorf("read stored blob %s: %w", d, err)
	}
	if !v.Verified() {
		return fmt.Errorf("stored blob %s: %w: content does not hash to its name", d, ErrDigestMismatch)
	}
	return nil
}

// put stores b, whose digest d the caller checked, unless the store has
// it: the index, manifest and config bytes as fetched.
func (c blobCache) put(d digest.Digest, b []byte) error {
	if c.has(d, int64(len(b))) {
		return nil
	}
	c.drop(d) // a symlink, FIFO or directory in its place
	if err := os.MkdirAll(filepath.Dir(c.path(d)), 0o700); err != nil {
		return fmt.Errorf("create blob cache: %w", err)
	}
	if err := atomicfile.WriteFile(c.path(d), b, 0o600); err != nil {
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	return nil
}

// verifyAll re-hashes every complete blob in the store and removes those
// that no longer match their name; it returns their digests. A store that
// cannot be read is an error; an absent one holds nothing.
func (c blobCache) verifyAll() (bad []digest.Digest, err error) {
	err = filepath.WalkDir(c.dir, func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == c.dir {
			return fs.SkipDir
		}
		if err != nil {
			return err
		}
		if p == c.dir || atomicfile.IsTemp(e.Name()) {
			return nil
		}
		d := digest.NewDigestFromEncoded(digest.Algorithm(filepath.Base(filepath.Dir(p))), e.Name())
		if d.Validate() != nil {
			return nil // not a blob name (an algorithm's directory): left alone
		}
		if e.IsDir() { // a directory where a blob should be
			c.drop(d)
			bad = append(bad, d)
			return fs.SkipDir
		}
		if cerr := c.check(d); errors.Is(cerr, ErrDigestMismatch) {
			c.drop(d)
			bad = append(bad, d)
		} else if cerr != nil {
			return cerr
		}
		return nil
	})
	if err != nil {
		return bad, fmt.Errorf("verify kept blobs: %w", err)
	}
	return bad, nil
}
