package installer

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/manifest"
	ociarchive "go.podman.io/image/v5/oci/archive"
	"go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/types"
)

// ErrLocalImage: Options.From names no usable OCI image layout or archive
// (missing, not a layout, truncated, or without the configured image's
// index). Bytes that do not match their digest wrap ErrDigestMismatch
// instead, as from a registry.
var ErrLocalImage = errors.New("not usable")

// noIndexHint is what to do about a local image that lacks the configured
// index: a copy of one platform's manifest has it not.
const noIndexHint = "an image copied without its index (skopeo copy without --all) cannot be checked against the pin; " +
	"make one with `skopeo copy --all docker://IMAGE oci-archive:FILE:TAG` (or oci:DIR:TAG) or `hbx export FILE`"

// noIndexError: the layout has no blob of the wanted top document (index).
// listed is what its index.json names instead; openImage fills in the
// wanted image's tag and who wants it (Options.Wanted) and words the
// error again.
type noIndexError struct {
	name   string // the local image, as localSource.name
	index  digest.Digest
	listed []v1.Descriptor
	tag    string // the wanted image's tag; "" unknown
	wanted string // "" is the pin (the configured image)
}

// newNoIndexError is the error for the local image name (index.json's
// bytes indexFile) that has no blob of index.
func newNoIndexError(name string, index digest.Digest, indexFile []byte) *noIndexError {
	var idx v1.Index
	_ = json.Unmarshal(indexFile, &idx) // checkLayout parsed it
	return &noIndexError{name: name, index: index, listed: idx.Manifests}
}

func (e *noIndexError) Error() string {
	want := e.index.String()
	if e.tag != "" {
		want += " (tag " + e.tag + ")"
	}
	var held []string
	hint := false
	for _, d := range e.listed {
		if d.Digest == e.index {
			return fmt.Sprintf("no blob %s though %s names it", want, v1.ImageIndexFile)
		}
		h := d.Digest.String()
		if n := d.Annotations[v1.AnnotationRefName]; n != "" {
			h += " (tag " + n + ")"
		}
		held = append(held, h)
		hint = hint || (d.MediaType != v1.MediaTypeImageIndex && d.MediaType != manifest.DockerV2ListMediaType)
	}
	msg := "it holds " + strings.Join(held, ", ")
	if e.wanted == "" {
		msg += " but the pin wants " + want
	} else {
		msg += " but " + e.wanted + " is " + want
	}
	if hint {
		msg += "; " + noIndexHint
	}
	return msg
}

// localSource is an OCI image layout directory or OCI archive read
// through the image library's oci/layout and oci/archive transports,
// seen by resolve and the blob store as the registry is. Every document
// is read by its digest (blobs/sha256/<hex>), never by trusting
// index.json: the top document is the blob of the configured index
// digest. It makes no network request.
type localSource struct {
	name  string // "OCI layout DIR" or "OCI archive FILE", for messages
	kind  string // "layout" or "archive"
	index digest.Digest
	src   types.ImageSource // the library's source
	root  *os.Root          // the layout directory; nil for an archive
}

var _ types.ImageSource = (*localSource)(nil)

// openLocal opens from (a directory: an OCI image layout; a regular file:
// an OCI archive, unpacked by the library into a directory under scratch,
// removed by Close) for the image whose top document is index.
func openLocal(ctx context.Context, from string, index digest.Digest, scratch string) (*localSource, error) {
	abs, err := filepath.Abs(from)
	if err != nil {
		return nil, fmt.Errorf("local image %s: %w", from, err)
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("local image %s: %w: it does not exist", from, ErrLocalImage)
	case err != nil:
		return nil, fmt.Errorf("local image %s: %w", from, err)
	case st.IsDir():
		return openLayout(ctx, abs, index)
	case st.Mode().IsRegular():
		return openArchive(ctx, abs, index, scratch)
	}
	return nil, fmt.Errorf("local image %s: %w: neither a directory (OCI layout) nor a regular file (OCI archive)", from, ErrLocalImage)
}

// openLayout opens the OCI image layout dir (absolute) through an
// os.Root: no path in it leads outside.
func openLayout(ctx context.Context, dir string, index digest.Digest) (_ *localSource, err error) {
	name := "OCI layout " + dir
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer func() {
		if err != nil {
			root.Close()
		}
	}()
	lb, err := readCapped(root, v1.ImageLayoutFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	ib, ierr := readCapped(root, v1.ImageIndexFile)
	if ierr != nil && !errors.Is(ierr, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", name, ierr)
	}
	i, err := checkLayout(lb, err == nil, ib, ierr == nil, index)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if _, err := root.Stat(blobName(index)); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w: %w", name, ErrLocalImage, newNoIndexError(name, index, ib))
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	ref, err := layout.NewReaderWithRoot(root).NewIndexReference(dir, i)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	src, err := ref.NewImageSource(ctx, &types.SystemContext{})
	if err != nil {
		return nil, fmt.Errorf("%s: open: %w", name, err)
	}
	return &localSource{name: name, kind: "layout", index: index, src: src, root: root}, nil
}

// readCapped reads a layout's small JSON file, at most maxManifestBytes.
func readCapped(root *os.Root, name string) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := readAllCapped(f, maxManifestBytes)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return b, nil
}

// blobName is where an OCI layout keeps the blob d.
func blobName(d digest.Digest) string {
	return path.Join(v1.ImageBlobsDir, string(d.Algorithm()), d.Encoded())
}

// checkLayout checks a layout's oci-layout file (image-layout.md:
// imageLayoutVersion 1.0.0) and index.json, and returns the index.json
// entry to open the library's source with: the one naming index, else the
// first. Only the opening uses it; every document is then read by digest.
func checkLayout(layoutFile []byte, hasLayout bool, indexFile []byte, hasIndex bool, index digest.Digest) (int, error) {
	if !hasLayout {
		return 0, fmt.Errorf("%w: no %s file: not an OCI image layout", ErrLocalImage, v1.ImageLayoutFile)
	}
	var l v1.ImageLayout
	if err := json.Unmarshal(layoutFile, &l); err != nil {
		return 0, fmt.Errorf("%w: parse %s: %w", ErrLocalImage, v1.ImageLayoutFile, err)
	}
	if l.Version != v1.ImageLayoutVersion {
		return 0, fmt.Errorf("%w: %s says imageLayoutVersion %q, want %q", ErrLocalImage, v1.ImageLayoutFile, l.Version, v1.ImageLayoutVersion)
	}
	if !hasIndex {
		return 0, fmt.Errorf("%w: no %s file: not an OCI image layout", ErrLocalImage, v1.ImageIndexFile)
	}
	var idx v1.Index
	if err := json.Unmarshal(indexFile, &idx); err != nil {
		return 0, fmt.Errorf("%w: parse %s: %w", ErrLocalImage, v1.ImageIndexFile, err)
	}
	if len(idx.Manifests) == 0 {
		return 0, fmt.Errorf("%w: %s lists no image", ErrLocalImage, v1.ImageIndexFile)
	}
	for i, d := range idx.Manifests {
		if d.Digest == index {
			return i, nil
		}
	}
	return 0, nil
}

// openArchive opens the OCI archive file (absolute). A first pass reads
// the tar's headers only (skipping bodies by seeking): it refuses a
// truncated archive, one that is no OCI layout or lacks the index blob
// before anything is unpacked. The library then unpacks the whole archive
// into a directory under scratch (as much disk as the archive's size),
// removed by Close.
func openArchive(ctx context.Context, file string, index digest.Digest, scratch string) (*localSource, error) {
	name := "OCI archive " + file
	image, err := scanArchive(file, index)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	ref, err := ociarchive.NewReference(file, image)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return nil, fmt.Errorf("create scratch directory: %w", err)
	}
	src, err := ref.NewImageSource(ctx, &types.SystemContext{BigFilesTemporaryDir: scratch})
	if err != nil {
		return nil, fmt.Errorf("%s: unpack: %w", name, err)
	}
	return &localSource{name: name, kind: "archive", index: index, src: src}, nil
}

// scanArchive reads the archive's tar headers, oci-layout and index.json,
// checks them as checkLayout does and that the blob of index is present,
// and returns the image name (org.opencontainers.image.ref.name) the
// library opens the archive by: the index entry's, "" when index.json
// lists one image.
func scanArchive(file string, index digest.Digest) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var layoutFile, indexFile []byte
	var hasLayout, hasIndex, hasBlob bool
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("%w: read: %w (truncated or not a tar file)", ErrLocalImage, err)
		}
		switch strings.TrimPrefix(path.Clean(h.Name), "./") {
		case v1.ImageLayoutFile:
			hasLayout = true
			layoutFile, err = readAllCapped(tr, maxManifestBytes)
		case v1.ImageIndexFile:
			hasIndex = true
			indexFile, err = readAllCapped(tr, maxManifestBytes)
		case blobName(index):
			hasBlob = h.Typeflag == tar.TypeReg
		}
		if err != nil {
			return "", fmt.Errorf("%w: read %s: %w", ErrLocalImage, h.Name, err)
		}
	}
	i, err := checkLayout(layoutFile, hasLayout, indexFile, hasIndex, index)
	if err != nil {
		return "", err
	}
	if !hasBlob {
		return "", fmt.Errorf("%w: %w", ErrLocalImage, newNoIndexError("OCI archive "+file, index, indexFile))
	}
	var idx v1.Index
	_ = json.Unmarshal(indexFile, &idx) // checkLayout parsed it
	if len(idx.Manifests) == 1 {
		return "", nil
	}
	if n := idx.Manifests[i].Annotations[v1.AnnotationRefName]; n != "" {
		return n, nil
	}
	for _, d := range idx.Manifests {
		if n := d.Annotations[v1.AnnotationRefName]; n != "" {
			return n, nil
		}
	}
	return "", fmt.Errorf("%w: %s lists %d images, none named (%s)", ErrLocalImage, v1.ImageIndexFile, len(idx.Manifests), v1.AnnotationRefName)
}

// Reference returns the library's reference of the layout or archive.
func (l *localSource) Reference() types.ImageReference { return l.src.Reference() }

// Close closes the library's source (an archive's unpacked directory is
// removed) and the layout's root.
func (l *localSource) Close() error {
	err := l.src.Close()
	if l.root != nil {
		if cerr := l.root.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// GetManifest returns the blob of the configured index digest
// (instanceDigest nil) or of instanceDigest, read whole up to
// maxManifestBytes. resolve checks the bytes against the digest.
func (l *localSource) GetManifest(ctx context.Context, instanceDigest *digest.Digest) ([]byte, string, error) {
	d := l.index
	if instanceDigest != nil {
		d = *instanceDigest
	}
	rc, _, err := l.GetBlob(ctx, types.BlobInfo{Digest: d, Size: -1}, none.NoCache)
	if err != nil {
		return nil, "", err
	}
	defer rc.Close()
	b, err := readAllCapped(rc, maxManifestBytes)
	if err != nil {
		return nil, "", fmt.Errorf("read blob %s: %w", d, err)
	}
	return b, "", nil
}

// GetBlob opens the blob info names; a blob the image lacks is an
// ErrLocalImage. Its size and digest are the caller's to check.
func (l *localSource) GetBlob(ctx context.Context, info types.BlobInfo, cache types.BlobInfoCache) (io.ReadCloser, int64, error) {
	if err := info.Digest.Validate(); err != nil {
		return nil, 0, fmt.Errorf("blob digest %q: %w", info.Digest, err)
	}
	rc, n, err := l.src.GetBlob(ctx, info, cache)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("%w: no blob %s in it", ErrLocalImage, info.Digest)
	}
	return rc, n, err
}

// HasThreadSafeGetBlob reports false, as the library's sources do.
func (l *localSource) HasThreadSafeGetBlob() bool { return false }

// GetSignatures returns no signatures: hbx pins digests instead.
func (l *localSource) GetSignatures(context.Context, *digest.Digest) ([][]byte, error) {
	return nil, nil
}

// LayerInfosForCopy returns nil: the manifest's layers are the ones to use.
func (l *localSource) LayerInfosForCopy(context.Context, *digest.Digest) ([]types.BlobInfo, error) {
	return nil, nil
}
