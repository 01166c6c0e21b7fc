package installer

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/manifest"
	ociarchive "go.podman.io/image/v5/oci/archive"
	"go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/types"
	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/regfile"
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

// localSource is an OCI image layout directory or OCI archive, seen by
// resolve and the blob store as the registry is. Every document is read
// by its digest (blobs/sha256/<hex>), never by trusting index.json: the
// top document is the blob of the configured index digest. It makes no
// network request and writes nothing: a layout's files are opened through
// an os.Root, an archive is read in place from the one descriptor opened
// (each blob a section of the tar file). Only regular files are read: a
// FIFO, device, symlink out of the layout or directory is refused before
// any byte of it is read, without blocking.
type localSource struct {
	name  string // "OCI layout DIR" or "OCI archive FILE", for messages
	kind  string // "layout" or "archive"
	index digest.Digest
	ref   types.ImageReference // the image library's reference, for Reference
	root  *os.Root             // the layout directory; nil for an archive
	file  *os.File             // the archive; nil for a layout
	spans map[string]span      // the archive's regular files by cleaned name
}

var _ types.ImageSource = (*localSource)(nil)

// span is where a regular file's bytes lie in an archive: size bytes from
// offset off.
type span struct{ off, size int64 }

// openLocal opens from (a directory: an OCI image layout; a regular file:
// an OCI archive, read in place) for the image whose top document is
// index. A FIFO, device or socket at from is refused without blocking.
func openLocal(from string, index digest.Digest) (*localSource, error) {
	abs, dir, err := fromKind(from)
	switch {
	case err != nil:
		return nil, err
	case dir:
		return openLayout(abs, index)
	default:
		return openArchive(abs, index)
	}
}

// CheckFrom checks what --from names before a command changes anything:
// an existing directory (an OCI image layout) or regular file (an OCI
// archive). Its errors start with "local image FROM: " and wrap
// ErrLocalImage when FROM is missing or of another type. Whether the
// layout or archive holds the image is checked when it is read.
func CheckFrom(from string) error {
	_, _, err := fromKind(from)
	return err
}

// fromKind returns from made absolute and whether it is a directory; an
// error (see CheckFrom) when it is neither a directory nor a regular file.
func fromKind(from string) (abs string, dir bool, err error) {
	abs, err = filepath.Abs(from)
	if err != nil {
		return "", false, fmt.Errorf("local image %s: %w", from, err)
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("local image %s: %w: it does not exist", from, ErrLocalImage)
	case err != nil:
		return "", false, fmt.Errorf("local image %s: %w", from, err)
	case st.IsDir():
		return abs, true, nil
	case st.Mode().IsRegular():
		return abs, false, nil
	}
	return "", false, fmt.Errorf("local image %s: %w: neither a directory (OCI layout) nor a regular file (OCI archive)", from, ErrLocalImage)
}

// openLayout opens the OCI image layout dir (absolute) through an
// os.Root: no path in it leads outside.
func openLayout(dir string, index digest.Digest) (_ *localSource, err error) {
	name := "OCI layout " + dir
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	l := &localSource{name: name, kind: "layout", index: index, root: root}
	defer func() {
		if err != nil {
			root.Close()
		}
	}()
	i, err := l.check()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// Only for Reference: nil when the library's syntax (DIR:IMAGE)
	// cannot name dir, one with a colon; nothing is read through it.
	l.ref, _ = layout.NewReaderWithRoot(root).NewIndexReference(dir, i)
	return l, nil
}

// check reads the oci-layout and index.json files and checks them
// (checkLayout) and that the blob of the configured index is present; it
// returns the index.json entry the image library's reference names.
func (l *localSource) check() (int, error) {
	lb, err := l.readSmall(v1.ImageLayoutFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	ib, ierr := l.readSmall(v1.ImageIndexFile)
	if ierr != nil && !errors.Is(ierr, fs.ErrNotExist) {
		return 0, ierr
	}
	i, err := checkLayout(lb, err == nil, ib, ierr == nil, l.index)
	if err != nil {
		return 0, err
	}
	if rc, _, err := l.open(blobName(l.index)); errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("%w: %w", ErrLocalImage, newNoIndexError(l.name, l.index, ib))
	} else if err != nil {
		return 0, err
	} else {
		rc.Close()
	}
	return i, nil
}

// readSmall reads the layout's small JSON file name, at most
// maxManifestBytes.
func (l *localSource) readSmall(name string) ([]byte, error) {
	rc, _, err := l.open(name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := readAllCapped(rc, maxManifestBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrLocalImage, name, err)
	}
	return b, nil
}

// open opens the layout's file name (slash-separated, relative) and
// returns its size: from the layout directory through the root, opened
// without blocking and refused (ErrLocalImage) unless it is a regular
// file with one name (a hard link may be to a file outside the layout);
// from the archive, its section. A name that is absent wraps
// fs.ErrNotExist.
func (l *localSource) open(name string) (io.ReadCloser, int64, error) {
	if l.root == nil {
		s, ok := l.spans[name]
		if !ok {
			return nil, 0, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
		return io.NopCloser(io.NewSectionReader(l.file, s.off, s.size)), s.size, nil
	}
	f, err := l.root.OpenFile(name, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, err
	}
	if err != nil { // a symlink out of the layout, a file it may not read
		return nil, 0, fmt.Errorf("%w: %w", ErrLocalImage, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%w: %s is %s, not a regular file", ErrLocalImage, name, typeName(st.Mode()))
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink > 1 {
		f.Close()
		return nil, 0, fmt.Errorf("%w: %s is a hard link (%d names): its other names may lie outside the layout", ErrLocalImage, name, sys.Nlink)
	}
	return f, st.Size(), nil
}

// typeName names a file type for messages.
func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "not a regular file"
}

// blobName is where an OCI layout keeps the blob d.
func blobName(d digest.Digest) string {
	return path.Join(v1.ImageBlobsDir, string(d.Algorithm()), d.Encoded())
}

// checkLayout checks a layout's oci-layout file (image-layout.md:
// imageLayoutVersion 1.0.0) and index.json, and returns the index.json
// entry to name the library's reference with: the one naming index, else
// the first. Only that uses it; every document is then read by digest.
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

// maxArchiveEntries caps the entries of an OCI archive (an image has a
// few dozen blobs).
const maxArchiveEntries = 1 << 16

// maxArchiveName caps an archive entry's name, in bytes: the longest an
// OCI layout uses is "./blobs/sha512/" and 128 hex digits (143 bytes). A
// longer one is refused before the next header is read, so the scan holds
// one name at a time (issue 25 item 4: an archive of 1,000 one-MiB names
// held them all, 1.19 GB).
const maxArchiveName = 256

// openArchive opens the OCI archive file (absolute) and reads it in
// place: one pass over its tar headers (bodies skipped by seeking)
// records where each regular file lies, and every later read is a
// section of that one descriptor. Nothing is unpacked, so the archive
// costs no disk and a file swapped at the path after the open is not
// read. The scan refuses (ErrLocalImage) a truncated archive, an entry
// whose name leaves the archive (absolute or through ".."), a name given
// twice, a layout name (oci-layout, index.json, blobs/...) that is not a
// regular file (a symlink, hardlink, device, FIFO or sparse file), a name
// longer than maxArchiveName and more than maxArchiveEntries entries;
// other entries are skipped. It keeps the layout files' names and 8
// bytes for each other name.
func openArchive(file string, index digest.Digest) (_ *localSource, err error) {
	name := "OCI archive " + file
	f, err := regfile.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", name, ErrLocalImage, err)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	l := &localSource{name: name, kind: "archive", index: index, file: f}
	if l.spans, err = scanArchive(f); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	i, err := l.check()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// Only for Reference, as for a layout: nil when the library cannot
	// name file (a colon in it) or the image.
	l.ref, _ = ociarchive.NewReference(file, l.imageName(i))
	return l, nil
}

// scanArchive reads the tar headers of f and returns where each regular
// file of the layout lies; see openArchive for what it refuses.
func scanArchive(f *os.File) (map[string]span, error) {
	spans := map[string]span{}
	seen := map[uint64]bool{} // names' hashes: 8 bytes an entry
	seed := maphash.MakeSeed()
	tr := tar.NewReader(f)
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			return spans, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: read: %w (truncated or not a tar file)", ErrLocalImage, err)
		}
		if n >= maxArchiveEntries {
			return nil, fmt.Errorf("%w: more than %d entries", ErrLocalImage, maxArchiveEntries)
		}
		name, err := archiveName(h)
		if err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		// Two names with one hash are refused as one name given twice: at
		// 64 bits, among at most maxArchiveEntries names, never in practice.
		sum := maphash.String(seed, name)
		if seen[sum] {
			return nil, fmt.Errorf("%w: entry %q: the name is given more than once", ErrLocalImage, h.Name)
		}
		seen[sum] = true
		if !layoutFile(name) {
			continue
		}
		if err := regularEntry(h); err != nil {
			return nil, err
		}
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, fmt.Errorf("%w: read: %w", ErrLocalImage, err)
		}
		spans[name] = span{off: off, size: h.Size}
	}
}

// archiveName is the entry's name cleaned ("./x" and "x" are one name);
// a name that leaves the archive, or longer than maxArchiveName, is
// refused.
func archiveName(h *tar.Header) (string, error) {
	if len(h.Name) > maxArchiveName {
		return "", fmt.Errorf("%w: entry %.40q...: a name of %d bytes, longer than any an OCI layout uses (at most %d)", ErrLocalImage, h.Name, len(h.Name), maxArchiveName)
	}
	n := path.Clean(h.Name)
	if path.IsAbs(n) || n == ".." || strings.HasPrefix(n, "../") {
		return "", fmt.Errorf("%w: entry %q: the name leaves the archive", ErrLocalImage, h.Name)
	}
	return n, nil
}

// layoutFile reports whether name is one an OCI layout reader opens.
func layoutFile(name string) bool {
	return name == v1.ImageLayoutFile || name == v1.ImageIndexFile || strings.HasPrefix(name, v1.ImageBlobsDir+"/")
}

// regularEntry refuses a layout entry that is not a plain regular file.
func regularEntry(h *tar.Header) error {
	kind := ""
	switch h.Typeflag {
	case tar.TypeReg:
		for k := range h.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				kind = "a sparse file"
			}
		}
	case tar.TypeSymlink:
		kind = "a symlink"
	case tar.TypeLink:
		kind = "a hardlink"
	case tar.TypeChar, tar.TypeBlock:
		kind = "a device"
	case tar.TypeFifo:
		kind = "a FIFO"
	case tar.TypeGNUSparse:
		kind = "a sparse file"
	default:
		kind = fmt.Sprintf("of type %q", h.Typeflag)
	}
	if kind != "" {
		return fmt.Errorf("%w: entry %q is %s, not a regular file", ErrLocalImage, h.Name, kind)
	}
	return nil
}

// imageName returns the image name (org.opencontainers.image.ref.name)
// the library's reference names the archive by: index.json's entry i's,
// "" when index.json lists one image or names none. Every document is
// read by digest, so an archive whose entries are unnamed is not refused.
func (l *localSource) imageName(i int) string {
	b, err := l.readSmall(v1.ImageIndexFile)
	if err != nil {
		return ""
	}
	var idx v1.Index
	_ = json.Unmarshal(b, &idx) // check parsed it
	if len(idx.Manifests) <= 1 {
		return ""
	}
	if n := idx.Manifests[i].Annotations[v1.AnnotationRefName]; n != "" {
		return n
	}
	for _, d := range idx.Manifests {
		if n := d.Annotations[v1.AnnotationRefName]; n != "" {
			return n
		}
	}
	return ""
}

// Reference returns the library's reference of the layout or archive,
// nil when the library's syntax cannot name it (a path with a colon).
// hbx reads nothing through it (registryHost names a local image
// without it).
func (l *localSource) Reference() types.ImageReference { return l.ref }

// Close closes the layout's root or the archive file.
func (l *localSource) Close() error {
	if l.root != nil {
		return l.root.Close()
	}
	return l.file.Close()
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
	rc, n, err := l.open(blobName(info.Digest))
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
