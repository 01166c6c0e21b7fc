package ociarchive

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/regfile"
)

// Errors of a blob the store cannot give as named. Use errors.Is.
var (
	// ErrMissing: the store has no blob of that digest.
	ErrMissing = errors.New("missing")
	// ErrDigestMismatch: a stored blob's bytes do not hash to its digest,
	// or its size differs from its descriptor's.
	ErrDigestMismatch = errors.New("digest mismatch")
	// ErrNotRegular: the archive's path holds something other than a
	// regular file (a directory, a symlink, a device); it is left alone.
	ErrNotRegular = errors.New("not a regular file")
)

// Store gives blobs by digest: the reader and the stored size in bytes;
// an error wrapping ErrMissing when it has no such blob.
type Store interface {
	Open(d digest.Digest) (io.ReadCloser, int64, error)
}

// Dir is a Store over a directory of blobs named <alg>/<hex>: the runtime
// directory's blob store, or an OCI image layout's blobs/.
type Dir string

// Open opens the blob d, which must be a valid digest; a blob that is
// absent, or not a regular file (a symlink, FIFO, device or directory:
// nothing hbx's store puts there), wraps ErrMissing. It never follows a
// symlink at the blob's name nor blocks on a FIFO.
func (dir Dir) Open(d digest.Digest) (io.ReadCloser, int64, error) {
	if err := d.Validate(); err != nil {
		return nil, 0, fmt.Errorf("blob digest %q: %w", d, err)
	}
	p := filepath.Join(string(dir), string(d.Algorithm()), d.Encoded())
	f, err := regfile.OpenNoFollow(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, 0, fmt.Errorf("blob %s is %w from %s", d, ErrMissing, dir)
	case errors.Is(err, regfile.ErrNotRegular):
		return nil, 0, fmt.Errorf("blob %s is %w from %s (not a regular file)", d, ErrMissing, dir)
	case err != nil:
		return nil, 0, fmt.Errorf("open blob %s: %w", d, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("stat blob %s: %w", d, err)
	}
	return f, st.Size(), nil
}

// Image is what an archive holds: Top, the image's top document (an
// index, manifest list or single manifest) named in index.json with Tag
// as its org.opencontainers.image.ref.name, and Blobs, every blob of the
// archive (Top among them), each digest once.
type Image struct {
	Top   v1.Descriptor
	Tag   string
	Blobs []v1.Descriptor
}

// Stats says what a write wrote.
type Stats struct {
	Blobs     int   // blobs in the archive
	BlobBytes int64 // their bytes
	Bytes     int64 // the archive's bytes
}

// Constants of the deterministic tar.
var epoch = time.Unix(0, 0).UTC()

const (
	dirMode  = 0o755
	fileMode = 0o644
	// FileMode is the mode WriteFile gives the archive: an image is public.
	FileMode os.FileMode = fileMode
)

// entry is one tar entry: a directory (blob zero and data nil), a
// document (data) or a blob.
type entry struct {
	name string
	dir  bool
	data []byte
	blob v1.Descriptor
}

// entries lists img's archive entries in name order.
func (img Image) entries() ([]entry, error) {
	if err := img.Top.Digest.Validate(); err != nil {
		return nil, fmt.Errorf("image digest %q: %w", img.Top.Digest, err)
	}
	top := img.Top
	top.Annotations = map[string]string{v1.AnnotationRefName: img.Tag}
	if img.Tag == "" {
		top.Annotations = nil
	}
	index, err := json.Marshal(v1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageIndex,
		Manifests: []v1.Descriptor{top},
	})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", v1.ImageIndexFile, err)
	}
	layout, err := json.Marshal(v1.ImageLayout{Version: v1.ImageLayoutVersion})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", v1.ImageLayoutFile, err)
	}
	es := []entry{
		{name: "blobs/", dir: true},
		{name: v1.ImageIndexFile, data: index},
		{name: v1.ImageLayoutFile, data: layout},
	}
	dirs, seen := map[string]bool{}, map[digest.Digest]bool{}
	hasTop := false
	for _, b := range img.Blobs {
		if err := b.Digest.Validate(); err != nil {
			return nil, fmt.Errorf("blob digest %q: %w", b.Digest, err)
		}
		if seen[b.Digest] {
			continue
		}
		seen[b.Digest] = true
		hasTop = hasTop || b.Digest == img.Top.Digest
		alg := "blobs/" + string(b.Digest.Algorithm()) + "/"
		if !dirs[alg] {
			dirs[alg] = true
			es = append(es, entry{name: alg, dir: true})
		}
		es = append(es, entry{name: alg + b.Digest.Encoded(), blob: b})
	}
	if !hasTop {
		return nil, fmt.Errorf("image %s: its top document is not among its blobs", img.Top.Digest)
	}
	slices.SortFunc(es, func(a, b entry) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	return es, nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Write writes img as an OCI archive (a tar of the image layout) to w,
// copying every blob from s and hashing it on the way; it stops with
// ctx's error once ctx is done. On an error part of the archive may have
// been written; the error names the blob (a missing one wraps
// ErrMissing, a damaged one ErrDigestMismatch).
func Write(ctx context.Context, w io.Writer, img Image, s Store) (Stats, error) {
	es, err := img.entries()
	if err != nil {
		return Stats{}, err
	}
	cw := &countWriter{w: w}
	tw := tar.NewWriter(cw)
	var st Stats
	for _, e := range es {
		hdr := &tar.Header{Name: e.name, ModTime: epoch, Format: tar.FormatUSTAR}
		switch {
		case e.dir:
			hdr.Typeflag, hdr.Mode = tar.TypeDir, dirMode
			if err := tw.WriteHeader(hdr); err != nil {
				return st, fmt.Errorf("write %s: %w", e.name, err)
			}
		case e.data != nil:
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, fileMode, int64(len(e.data))
			if err := tw.WriteHeader(hdr); err != nil {
				return st, fmt.Errorf("write %s: %w", e.name, err)
			}
			if _, err := tw.Write(e.data); err != nil {
				return st, fmt.Errorf("write %s: %w", e.name, err)
			}
		default:
			if err := copyBlob(ctx, tw, hdr, e.blob, s); err != nil {
				return st, err
			}
			st.Blobs++
			st.BlobBytes += e.blob.Size
		}
	}
	if err := tw.Close(); err != nil {
		return st, fmt.Errorf("finish archive: %w", err)
	}
	st.Bytes = cw.n
	return st, nil
}

// copyBlob writes blob b from s as the entry hdr names, checking its size
// before the header and its digest while its bytes are copied.
func copyBlob(ctx context.Context, tw *tar.Writer, hdr *tar.Header, b v1.Descriptor, s Store) error {
	rc, size, err := s.Open(b.Digest)
	if err != nil {
		return err
	}
	defer rc.Close()
	if size != b.Size {
		return fmt.Errorf("stored blob %s: %w: %d bytes, its descriptor says %d", b.Digest, ErrDigestMismatch, size, b.Size)
	}
	hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, fileMode, size
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write blob %s: %w", b.Digest, err)
	}
	v := b.Digest.Verifier()
	n, err := io.CopyBuffer(io.MultiWriter(tw, v), ctxReader{ctx, io.LimitReader(rc, size)}, make([]byte, 256<<10))
	if err != nil {
		return fmt.Errorf("copy blob %s: %w", b.Digest, err)
	}
	if n != size {
		return fmt.Errorf("stored blob %s: %w: read %d bytes of %d", b.Digest, ErrDigestMismatch, n, size)
	}
	if !v.Verified() {
		return fmt.Errorf("stored blob %s: %w: content does not hash to its name", b.Digest, ErrDigestMismatch)
	}
	return nil
}

// ctxReader reads r until ctx is done, then returns ctx's error.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// WriteFile writes img as an OCI archive at path (mode 0644), durably and
// atomically (see the package doc), as Write does: on any error (ctx
// done included) nothing is left at path and an existing regular file
// there is unchanged. Anything but a regular file at path is refused
// (ErrNotRegular). The temporary file is locked (flock) while it is
// written; first, the temporary files of earlier writes to path that were
// killed (".tmp-<name>-<hex>" beside it, regular, owned by this user, not
// locked by a live writer) are removed.
func WriteFile(ctx context.Context, path string, img Image, s Store) (Stats, error) {
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return Stats{}, fmt.Errorf("write archive %s: %w: it is %s", path, ErrNotRegular, regfile.Kind(fi.Mode()))
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Stats{}, fmt.Errorf("write archive %s: %w", path, err)
	}
	removeLeftovers(path)
	var st Stats
	err := atomicfile.Write(path, FileMode, func(w io.Writer) error {
		if f, ok := w.(*os.File); ok {
			// Held until the file is closed: removeLeftovers leaves it be.
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
				return fmt.Errorf("lock temporary file: %w", err)
			}
		}
		var err error
		st, err = Write(ctx, w, img, s)
		return err
	})
	if err != nil {
		return Stats{}, err
	}
	return st, nil
}

// removeLeftovers removes the temporary files a killed WriteFile to path
// left: named ".tmp-<name>-<12 hex>" in path's directory, regular files
// (not followed through a symlink) owned by this process's user, whose
// flock it can take (no live writer holds it). Errors leave a file alone.
func removeLeftovers(path string) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := atomicfile.TempPrefix + base + "-"
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || len(rest) != 12 || strings.Trim(rest, "0123456789abcdef") != "" || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && int(st.Uid) == os.Geteuid() &&
			unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			os.Remove(p)
		}
		unix.Close(fd)
	}
}
