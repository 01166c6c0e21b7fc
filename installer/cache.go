package installer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hermesbox/hbx/internal/atomicfile"
	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/types"
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
// its size and digest, retrying transient failures.
func (c blobCache) fetch(ctx context.Context, src types.ImageSource, desc v1.Descriptor, retries int, log *slog.Logger) (fetched bool, err error) {
	if err := desc.Digest.Validate(); err != nil {
		return false, fmt.Errorf("blob digest %q: %w", desc.Digest, err)
	}
	if c.has(desc.Digest, desc.Size) {
		return false, nil
	}
	dir := filepath.Dir(c.path(desc.Digest))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("create blob cache: %w", err)
	}
	var last error
	for attempt := 0; attempt <= retries; attempt++ {
		if attempt > 0 {
			wait := time.Duration(1<<min(attempt-1, 5)) * 250 * time.Millisecond
			log.Warn("retrying blob", "digest", desc.Digest, "attempt", attempt, "after", wait, "cause", last)
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(wait):
			}
		}
		last = c.fetchOnce(ctx, src, desc)
		if last == nil {
			return true, nil
		}
		if errors.Is(last, ErrDigestMismatch) || ctx.Err() != nil {
			break // a registry that lies will lie again
		}
	}
	return false, last
}

func (c blobCache) fetchOnce(ctx context.Context, src types.ImageSource, desc v1.Descriptor) (err error) {
	rc, _, err := src.GetBlob(ctx, types.BlobInfo{Digest: desc.Digest, Size: desc.Size}, none.NoCache)
	if err != nil {
		return fmt.Errorf("fetch: %w", err)
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
	v := desc.Digest.Verifier()
	// Read one byte past the declared size to catch a registry that sends more.
	n, err := io.Copy(io.MultiWriter(f, v), io.LimitReader(rc, desc.Size+1))
	if err != nil {
		return fmt.Errorf("download: %w", err)
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

// open opens a cached blob.
func (c blobCache) open(d digest.Digest) (*os.File, error) {
	return os.Open(c.path(d))
}

// drop removes a cached blob found to be bad.
func (c blobCache) drop(d digest.Digest) { os.Remove(c.path(d)) }
