package backup

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// tarName is the tar entry name of archive path p: "./" for the root,
// "./x" below it, with a trailing slash for directories, as
// `tar -C DIR .` names them.
func tarName(p, typ string) string {
	n := "./"
	if p != "." {
		n += p
		if typ == TypeDir {
			n += "/"
		}
	}
	return n
}

// header returns the tar header of it: PAX, numeric owners, mtime to the
// nanosecond, xattrs as SCHILY.xattr.* records.
func (it *item) header() *tar.Header {
	h := &tar.Header{
		Name:    tarName(it.Path, it.Type),
		Mode:    int64(it.Mode),
		Uid:     it.uid,
		Gid:     it.gid,
		ModTime: it.mtime,
		Format:  tar.FormatPAX,
	}
	switch it.Type {
	case TypeDir:
		h.Typeflag = tar.TypeDir
	case TypeFile:
		h.Typeflag, h.Size = tar.TypeReg, it.Size
	case TypeSymlink:
		h.Typeflag, h.Linkname = tar.TypeSymlink, it.Link
	case TypeHardlink:
		h.Typeflag, h.Linkname = tar.TypeLink, tarName(it.Link, TypeFile)
	}
	if len(it.xattrs) > 0 {
		h.PAXRecords = make(map[string]string, len(it.xattrs))
		for k, v := range it.xattrs {
			h.PAXRecords[xattrPrefix+k] = v
		}
	}
	return h
}

// xattrPrefix starts the PAX records of extended attributes.
const xattrPrefix = "SCHILY.xattr."

// streamStats is what writeStream wrote.
type streamStats struct {
	size   int64  // bytes of the archive file
	sha256 string // hex sha256 of the archive file
}

// writeStream writes the archive of s with manifest m to w: tar, then
// compression, then (when passphrase is not nil) OpenPGP encryption.
func writeStream(w io.Writer, m *Manifest, s *scanner, c Compression, passphrase []byte, name string) (streamStats, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	hw := newHashWriter(bw)
	var sink io.Writer = hw
	var enc io.WriteCloser
	if passphrase != nil {
		var err error
		if enc, err = encrypt(hw, passphrase, strings.TrimSuffix(name, ".gpg"), m.Created); err != nil {
			return streamStats{}, err
		}
		sink = enc
	}
	zw, err := compressor(sink, c)
	if err != nil {
		return streamStats{}, err
	}
	tw := tar.NewWriter(zw)
	if err := writeEntries(tw, m, s); err != nil {
		return streamStats{}, err
	}
	if err := tw.Close(); err != nil {
		return streamStats{}, fmt.Errorf("finish tar: %w", err)
	}
	if err := zw.Close(); err != nil {
		return streamStats{}, fmt.Errorf("finish %s: %w", c, err)
	}
	if enc != nil {
		if err := enc.Close(); err != nil {
			return streamStats{}, fmt.Errorf("finish encryption: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return streamStats{}, err
	}
	return streamStats{size: hw.n, sha256: fmt.Sprintf("%x", hw.h.Sum(nil))}, nil
}

// writeEntries writes the manifest entry, then every item of s.
func writeEntries(tw *tar.Writer, m *Manifest, s *scanner) error {
	mb, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	if len(mb) > MaxManifestBytes {
		return fmt.Errorf("%w: the manifest of %d entries takes %d bytes, more than the %d an archive may hold (MaxManifestBytes): leave large trees out of backup.paths", ErrInvalid, len(m.Files), len(mb), MaxManifestBytes)
	}
	mh := &tar.Header{Typeflag: tar.TypeReg, Name: ManifestName, Mode: 0o600, Size: int64(len(mb)),
		Uid: os.Getuid(), Gid: os.Getgid(), ModTime: m.Created, Format: tar.FormatPAX}
	if err := tw.WriteHeader(mh); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	if _, err := tw.Write(mb); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	for _, it := range s.items {
		if err := tw.WriteHeader(it.header()); err != nil {
			return fmt.Errorf("entry %q: write header: %w", it.Path, err)
		}
		if it.Type != TypeFile {
			continue
		}
		if err := copyFile(tw, s.roots[it.root], it, *bp); err != nil {
			return fmt.Errorf("entry %q: %w", it.Path, err)
		}
	}
	return nil
}

// copyFile writes the content of it, checking that the file is still the
// one scanned, with the size scanned.
func copyFile(w io.Writer, r *root, it *item, buf []byte) error {
	f, err := openBeneath(fd(r.dir), it.rel)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd(f), &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if idOf(&st) != it.id || st.Size != it.Size {
		return errChanged
	}
	n, err := io.CopyBuffer(w, io.LimitReader(f, it.Size), buf)
	if err != nil {
		return err
	}
	if n != it.Size {
		return errChanged
	}
	return nil
}

// hashing counts and hashes the sha256 of the bytes that pass through
// it: written to w (Write) or read from r (Read).
type hashing struct {
	w io.Writer
	r io.Reader
	h hash.Hash
	n int64 // bytes passed
}

func newHashWriter(w io.Writer) *hashing { return &hashing{w: w, h: sha256.New()} }
func newHashReader(r io.Reader) *hashing { return &hashing{r: r, h: sha256.New()} }

func (h *hashing) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

func (h *hashing) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

// isOurs reports whether err already carries one of this package's
// classes, so wrappers do not relabel it.
func isOurs(err error) bool {
	for _, e := range []error{ErrCorrupt, ErrWrongPassphrase, ErrUndecryptable, ErrNoPassphrase, ErrNotProtected, ErrMismatch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
