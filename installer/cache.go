package installer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/types"

	"github.com/hermesbox/hbx/internal/atomicfile"
)

// blobCache is a content-addressed store of complete, verified blobs:
// <dir>/sha256/<hex>. A blob appears under its name only by rename after
// its bytes were hashed, so a name present means a complete blob.
type blobCache struct {
	dir string
}

// path names the blob; d must already be validated.
func (c blobCache) path(d digest.Digest) string {
	return filepath.Join(c.dir, string(d.Algorithm()), d.Encoded())
}

func (c blobCache) has(d digest.Digest, size int64) bool {
	st, err := os.Stat(c.path(d))
	return err == nil && st.Mode().IsRegular() && (size <= 0 || st.Size() == size)
}

// fetch copies the blob from src into the cache unless it is there, checking
// its size and digest, and finishes fd with the outcome: fd's reader can
// follow the bytes while they arrive. Transient failures are src's to
// retry (a *remote does, resuming the stream); bytes that do not match are
// refused with ErrDigestMismatch and never stored.
func (c blobCache) fetch(ctx context.Context, src types.ImageSource, desc v1.Descriptor, fd *feed) (err error) {
	fetched := false
	defer func() { fd.finish(fetched, err) }()
	if err := desc.Digest.Validate(); err != nil {
		return fmt.Errorf("blob digest %q: %w", desc.Digest, err)
	}
	if c.has(desc.Digest, desc.Size) {
		f, err := c.open(desc.Digest)
		if err != nil {
			return fmt.Errorf("open cached blob: %w", err)
		}
		fd.open(f, desc.Size)
		return nil
	}
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

// open opens a cached blob.
func (c blobCache) open(d digest.Digest) (*os.File, error) {
	return os.Open(c.path(d))
}

// drop removes a cached blob found to be bad.
func (c blobCache) drop(d digest.Digest) { os.Remove(c.path(d)) }
