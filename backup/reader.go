package backup

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/internal/readahead"
	"github.com/hermesbox/hbx/internal/regfile"
)

// PassphraseFunc returns the passphrase of an encrypted archive. It is
// called at most once, and only when the archive turns out to be
// encrypted.
type PassphraseFunc func() ([]byte, error)

// reader reads an archive entry by entry and checks as it goes: the
// OpenPGP integrity check and the compression's checksum at the end, every
// name (no "..", nothing beneath a symlink, no duplicates, hardlinks only
// to earlier files), and, when the archive has a manifest, every entry
// against it. Nothing read may be trusted before finish returns nil.
type reader struct {
	path       string
	f          *os.File
	raw        *hashing      // the archive file's bytes
	br         *bufio.Reader // buffered raw
	stopRA     func()        // stops the read-ahead of decrypted data
	armored    bool
	plain      io.Reader // after decryption
	zr         io.Reader // after decompression
	release    func()
	tr         *tar.Reader
	pending    *tar.Header // first data entry of a manifest-less archive
	Manifest   *Manifest
	Encrypted  bool
	Compressed string
	// Notes say how the archive was read when that needs telling (a
	// legacy passphrase form).
	Notes []string

	want map[string]*File  // manifest entries by path
	seen map[string]string // archive path -> type, entries read so far
	// seenBytes is the length of seen's names: without a manifest it is
	// bounded as a manifest is (MaxManifestBytes).
	seenBytes int
	cur       *current // the regular file being read
	// Entries, Files and Bytes count what was read: entries, regular files
	// and their content bytes.
	Entries int
	Files   int
	Bytes   int64
}

// current is the regular file entry being read.
type current struct {
	path string
	h    hash.Hash
	want *File
	left int64
}

// openArchive opens path and reads up to the first data entry. A wrong
// passphrase, an unreadable manifest or a stream that is neither OpenPGP,
// gzip, zstd nor tar fails here. pass is called at most once.
//
// The passphrase keys the decryption up to its first NUL byte, as in gpg
// (keyOf). When that does not decrypt the archive, the forms earlier hbx
// versions used are tried once each, with a note when one works: the
// whole line, NUL included, and, for a line ending in "\r", the line
// without it (LegacyPassphrase).
// When neither decrypts, the .sha256 file beside the archive decides: the
// bytes differ (ErrCorrupt), they match (ErrWrongPassphrase), or there is
// none (ErrUndecryptable).
func openArchive(p string, pass PassphraseFunc) (*reader, error) {
	var given []byte
	once := func() ([]byte, error) {
		if pass == nil {
			return nil, ErrNoPassphrase
		}
		b, err := pass()
		given = b
		return keyOf(b), err
	}
	r, err := openArchiveWith(p, once)
	if !errors.Is(err, errBadKey) {
		return r, err
	}
	if bytes.IndexByte(given, 0) >= 0 {
		r, lerr := openArchiveWith(p, func() ([]byte, error) { return given, nil })
		if lerr == nil {
			r.Notes = append(r.Notes, `decrypted with the passphrase file's whole first line, NUL byte included, as earlier hbx versions read it; gpg and archives written now stop at the first NUL`)
			return r, nil
		}
		if !errors.Is(lerr, errBadKey) {
			return nil, lerr
		}
	}
	if legacy, ok := LegacyPassphrase(given); ok {
		r, lerr := openArchiveWith(p, func() ([]byte, error) { return legacy, nil })
		if lerr == nil {
			r.Notes = append(r.Notes, `decrypted with the passphrase file's first line without its trailing "\r", as earlier hbx versions read it; archives written now use the line as gpg reads it, "\r" included`)
			return r, nil
		}
		if !errors.Is(lerr, errBadKey) {
			return nil, lerr
		}
	}
	return nil, keyFailure(p)
}

// keyFailure says why a passphrase did not decrypt the archive at p, as
// far as the files beside it tell: the .sha256 file and the sha256 in the
// .json file (a missing or malformed one is left out). When one of them
// matches the archive's bytes, they are intact (ErrWrongPassphrase); when
// every one there differs, the bytes changed (ErrCorrupt); without
// either, nothing tells (ErrUndecryptable). A damaged .sha256 file beside
// an intact archive and .json file is not blamed on the archive.
func keyFailure(p string) error {
	sums := sidecarSums(p)
	if len(sums) == 0 {
		return fmt.Errorf("%w (no readable %s.sha256 or .json to tell a damaged archive apart)", ErrUndecryptable, filepath.Base(p))
	}
	f, err := regfile.Open(p)
	if err != nil {
		return fmt.Errorf("%w: reopen archive: %w", ErrUndecryptable, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("%w: read archive: %w", ErrUndecryptable, err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	for _, s := range sums {
		if s.sum == got {
			return fmt.Errorf("%w: the archive's bytes match %s", ErrWrongPassphrase, s.file)
		}
	}
	return fmt.Errorf("%w: it does not decrypt and its sha256 %s differs from %s (%s): the archive's bytes changed, the passphrase may be right", ErrCorrupt, got, sums[0].file, sums[0].sum)
}

// sidecarSum is a sha256 (lowercase hex) a file beside an archive records.
type sidecarSum struct{ file, sum string }

// sidecarSums returns the well-formed sha256 values of the .sha256 and
// .json files beside the archive at p, in that order; a missing,
// unreadable or malformed one is left out.
func sidecarSums(p string) []sidecarSum {
	var out []sidecarSum
	if b, err := regfile.ReadFile(p+sumSuffix, 1<<20); err == nil {
		s, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		if isSHA256Hex(s) {
			out = append(out, sidecarSum{filepath.Base(p) + sumSuffix, s})
		}
	}
	if b, err := regfile.ReadFile(p+infoSuffix, 1<<20); err == nil {
		var in struct {
			SHA256 string `json:"sha256"`
		}
		if json.Unmarshal(b, &in) == nil && isSHA256Hex(in.SHA256) {
			out = append(out, sidecarSum{filepath.Base(p) + infoSuffix, in.SHA256})
		}
	}
	return out
}

// isSHA256Hex reports whether s is 64 lowercase hex digits (go-digest's
// rule for a sha256 encoding).
func isSHA256Hex(s string) bool {
	return digest.NewDigestFromEncoded(digest.SHA256, s).Validate() == nil
}

// openArchiveWith is openArchive with one passphrase; a passphrase that
// does not decrypt fails with errBadKey.
func openArchiveWith(p string, pass PassphraseFunc) (r *reader, err error) {
	f, err := regfile.Open(p)
	if err != nil {
		return nil, archiveOpenError(p, err)
	}
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_SEQUENTIAL)
	rd := &reader{path: p, f: f, raw: newHashReader(f), seen: map[string]string{}, release: func() {}}
	defer func() {
		if err != nil {
			rd.close()
		}
	}()
	// Layers: the file's bytes, decrypted, decompressed, as tar.
	if err := rd.openLayers(pass); err != nil {
		return nil, err
	}
	// The manifest, when the first entry is one.
	if err := rd.readManifest(); err != nil {
		return nil, err
	}
	return rd, nil
}

// readAheadBlocks buffers of readAheadBlock bytes read the decrypted
// stream ahead: four in flight, one being read.
const readAheadBlock, readAheadBlocks = 1 << 20, 5

// openLayers stacks the decryption (with pass, when the file is OpenPGP),
// the read-ahead, the decompressor and the tar reader over r.raw.
func (r *reader) openLayers(pass PassphraseFunc) (err error) {
	br := bufio.NewReaderSize(r.raw, 1<<20)
	r.br = br
	head, _ := br.Peek(32)
	if len(head) == 0 {
		return fmt.Errorf("%w: the file is empty", ErrCorrupt)
	}
	var in io.Reader = br
	if isOpenPGP(head) {
		if in, err = decrypt(br, pass); err != nil {
			return err
		}
		r.Encrypted, r.armored = true, head[0] == '-'
	}
	if r.Encrypted {
		// Decryption (and hashing the raw file) runs a few blocks ahead,
		// in parallel with decompression instead of inside its reads.
		ra := readahead.New(readAheadBlocks, readAheadBlock)
		ra.Start(in)
		r.stopRA = ra.Abort
		in = ra
	}
	r.plain = in
	zin := bufio.NewReaderSize(in, 1<<20)
	zr, kind, release, err := decompressor(zin)
	if err != nil {
		return err
	}
	r.zr, r.Compressed, r.release = zr, kind, release
	r.tr = tar.NewReader(zr)
	return nil
}

// readManifest reads the first entry: the manifest, parsed and indexed by
// path, or a data entry kept for next.
func (r *reader) readManifest() error {
	hdr, err := r.tr.Next()
	if err == io.EOF {
		return fmt.Errorf("%w: the tar stream is empty", ErrCorrupt)
	}
	if err != nil {
		return r.tarError(err)
	}
	if (hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeRegA) || cleanArchivePath(hdr.Name) != ManifestName {
		r.pending = hdr
		return nil
	}
	if hdr.Size > MaxManifestBytes {
		return fmt.Errorf("%w: %s claims %d bytes, more than the %d hbx writes at most", ErrCorrupt, ManifestName, hdr.Size, MaxManifestBytes)
	}
	b, err := io.ReadAll(r.tr)
	if err != nil {
		return r.tarError(err)
	}
	if r.Manifest, err = parseManifest(b); err != nil {
		return err
	}
	r.want = make(map[string]*File, len(r.Manifest.Files))
	for i := range r.Manifest.Files {
		f := &r.Manifest.Files[i]
		r.want[f.Path] = f
	}
	return nil
}

// tarError labels a tar read error, keeping ours (decryption, checksums).
func (r *reader) tarError(err error) error {
	if isOurs(err) {
		return err
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: the tar stream is cut short (truncated archive?)", ErrCorrupt)
	}
	return fmt.Errorf("%w: read tar: %w", ErrCorrupt, err)
}

// next returns the next data entry's header, or io.EOF after the last.
// Its name is the archive path (clean, "." for the root). A regular file's
// content is read with Read before the next call.
func (r *reader) next() (*tar.Header, error) {
	if err := r.endFile(); err != nil {
		return nil, err
	}
	for {
		var hdr *tar.Header
		if r.pending != nil {
			hdr, r.pending = r.pending, nil
		} else {
			var err error
			if hdr, err = r.tr.Next(); err == io.EOF {
				return nil, io.EOF
			} else if err != nil {
				return nil, r.tarError(err)
			}
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if hdr.Typeflag == tar.TypeFifo && r.Manifest == nil {
			// A plain tar of a data directory may hold a fifo; it is
			// left out, and said (an hbx archive never holds one).
			if p := cleanArchivePath(hdr.Name); p != "" && p != "." {
				r.Notes = append(r.Notes, fmt.Sprintf("not restored: %q (fifo)", p))
				continue
			}
		}
		if err := r.check(hdr); err != nil {
			return nil, &entryError{path: hdr.Name, err: err}
		}
		return hdr, nil
	}
}

// check validates hdr against the names seen so far and the manifest,
// rewrites its name to the clean archive path, and starts hashing a
// regular file.
func (r *reader) check(hdr *tar.Header) error {
	if len(hdr.Name) > maxNameBytes || len(hdr.Linkname) > maxNameBytes {
		return fmt.Errorf("%w: a name or link target longer than %d bytes", ErrCorrupt, maxNameBytes)
	}
	p := cleanArchivePath(hdr.Name)
	if p == "" {
		return fmt.Errorf("%w: absolute or with \"..\"", extract.ErrUnsafePath)
	}
	typ, err := entryType(hdr)
	if err != nil {
		return err
	}
	if err := r.checkPlace(p, typ); err != nil {
		return err
	}
	link, err := r.checkLink(hdr, typ)
	if err != nil {
		return err
	}
	if typ == TypeFile && hdr.Size < 0 {
		return fmt.Errorf("%w: size %d", ErrCorrupt, hdr.Size)
	}
	want, err := r.checkListed(p, typ, hdr, link)
	if err != nil {
		return err
	}
	r.seen[p] = typ
	if r.seenBytes += len(p); r.seenBytes > MaxManifestBytes {
		return fmt.Errorf("%w: more than %d bytes of entry names, more than an archive hbx writes holds", ErrCorrupt, MaxManifestBytes)
	}
	r.Entries++
	if typ == TypeFile {
		r.Files++
		r.cur = &current{path: p, h: sha256.New(), want: want, left: hdr.Size}
	}
	hdr.Name = p
	if typ == TypeHardlink {
		hdr.Linkname = link
	}
	return nil
}

// entryType is the manifest type of hdr; other types are refused.
func entryType(hdr *tar.Header) (string, error) {
	switch hdr.Typeflag {
	case tar.TypeDir:
		return TypeDir, nil
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archives use '\x00'
		return TypeFile, nil
	case tar.TypeSymlink:
		return TypeSymlink, nil
	case tar.TypeLink:
		return TypeHardlink, nil
	}
	return "", fmt.Errorf("%w: type %q (devices, fifos and sparse files are not backed up)", extract.ErrUnsupportedType, hdr.Typeflag)
}

// checkPlace refuses a root that is not a directory, an entry seen
// before, and one beneath an earlier symlink or file.
func (r *reader) checkPlace(p, typ string) error {
	if p == "." && typ != TypeDir {
		return fmt.Errorf("%w: the root may only be a directory", extract.ErrUnsafePath)
	}
	if _, dup := r.seen[p]; dup {
		return fmt.Errorf("%w: entry appears twice", ErrMismatch)
	}
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		switch r.seen[d] {
		case TypeSymlink:
			return fmt.Errorf("%w: beneath symlink %q", extract.ErrUnsafePath, d)
		case TypeFile, TypeHardlink:
			return fmt.Errorf("%w: beneath file %q", extract.ErrUnsafePath, d)
		}
	}
	return nil
}

// checkLink returns hdr's link target: a hardlink's as a clean archive
// path to an earlier file of the archive.
func (r *reader) checkLink(hdr *tar.Header, typ string) (string, error) {
	if typ != TypeHardlink {
		return hdr.Linkname, nil
	}
	link := cleanArchivePath(hdr.Linkname)
	if link == "" {
		return "", fmt.Errorf("%w: hardlink to %q", extract.ErrUnsafePath, hdr.Linkname)
	}
	if t := r.seen[link]; t != TypeFile && t != TypeHardlink {
		return "", fmt.Errorf("%w: hardlink to %q, which is not an earlier file of the archive", extract.ErrBadLink, hdr.Linkname)
	}
	return link, nil
}

// checkListed returns the manifest's entry for p (nil without a
// manifest), refusing an entry it does not list as it is.
func (r *reader) checkListed(p, typ string, hdr *tar.Header, link string) (*File, error) {
	if r.Manifest == nil {
		return nil, nil
	}
	want := r.want[p]
	switch {
	case want == nil:
		return nil, fmt.Errorf("%w: not listed in the manifest", ErrMismatch)
	case want.Type != typ:
		return nil, fmt.Errorf("%w: a %s, the manifest lists a %s", ErrMismatch, typ, want.Type)
	case want.Mode != uint32(hdr.Mode)&0o7777:
		return nil, fmt.Errorf("%w: mode %04o, the manifest lists %04o", ErrMismatch, hdr.Mode&0o7777, want.Mode)
	case typ == TypeFile && want.Size != hdr.Size:
		return nil, fmt.Errorf("%w: size %d, the manifest lists %d", ErrMismatch, hdr.Size, want.Size)
	case (typ == TypeSymlink || typ == TypeHardlink) && want.Link != link:
		return nil, fmt.Errorf("%w: link to %q, the manifest lists %q", ErrMismatch, link, want.Link)
	}
	return want, nil
}

// Read reads the current regular file's content.
func (r *reader) Read(b []byte) (int, error) {
	if r.cur == nil {
		return 0, io.EOF
	}
	n, err := r.tr.Read(b)
	r.cur.h.Write(b[:n])
	r.cur.left -= int64(n)
	r.Bytes += int64(n)
	if err != nil && err != io.EOF {
		err = &entryError{path: r.cur.path, err: r.tarError(err)}
	}
	return n, err
}

// endFile reads what is left of the current file and checks its sha256.
func (r *reader) endFile() error {
	c := r.cur
	if c == nil {
		return nil
	}
	bp := bufPool.Get().(*[]byte)
	_, err := io.CopyBuffer(io.Discard, readerOnly{r}, *bp)
	bufPool.Put(bp)
	r.cur = nil
	if err != nil {
		return err
	}
	if c.left != 0 {
		return &entryError{path: c.path, err: fmt.Errorf("%w: content cut short", ErrCorrupt)}
	}
	if c.want != nil {
		if got := hex.EncodeToString(c.h.Sum(nil)); got != c.want.SHA256 {
			return &entryError{path: c.path, err: fmt.Errorf("%w: content sha256 %s, the manifest lists %s", ErrMismatch, got, c.want.SHA256)}
		}
	}
	return nil
}

// readerOnly hides reader's other methods from io.CopyBuffer.
type readerOnly struct{ r io.Reader }

func (o readerOnly) Read(b []byte) (int, error) { return o.r.Read(b) }

// finish completes the checks once next returned io.EOF: the compression's
// checksum, the OpenPGP integrity check, no bytes after the message, every
// manifest entry present, and the .sha256 file beside the archive when
// there is one. It returns the archive file's size and hex sha256.
func (r *reader) finish() (int64, string, error) {
	if err := r.endFile(); err != nil {
		return 0, "", err
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	// The tar reader stops at the end-of-archive blocks; what follows
	// (padding, the compression trailer, the MDC) must still be read and
	// checked.
	if _, err := io.CopyBuffer(io.Discard, readerOnly{r.zr}, *bp); err != nil {
		return 0, "", r.tarError(err)
	}
	if r.plain != r.zr {
		if _, err := io.CopyBuffer(io.Discard, readerOnly{r.plain}, *bp); err != nil {
			return 0, "", r.tarError(err)
		}
	}
	n, err := io.CopyBuffer(io.Discard, readerOnly{r.br}, *bp)
	if err != nil {
		return 0, "", fmt.Errorf("read archive: %w", err)
	}
	if n > 0 && r.Encrypted && !r.armored {
		return 0, "", fmt.Errorf("%w: %d bytes follow the encrypted message", ErrCorrupt, n)
	}
	if r.Manifest != nil && r.Entries != len(r.Manifest.Files) {
		for _, f := range r.Manifest.Files {
			if _, ok := r.seen[f.Path]; !ok {
				return 0, "", &entryError{path: f.Path, err: fmt.Errorf("%w: listed in the manifest, missing from the archive", ErrMismatch)}
			}
		}
	}
	sum := hex.EncodeToString(r.raw.h.Sum(nil))
	if err := checkSumFile(r.path, sum); err != nil {
		return 0, "", err
	}
	return r.raw.n, sum, nil
}

// explain returns err, or, when the rest of the archive fails its
// checksum or integrity check, that damage (the cause; err was its first
// symptom, such as a garbled name or a manifest mismatch). It reads the
// rest of the archive, so it is for failures only.
func (r *reader) explain(err error) error {
	if err == nil || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrWrongPassphrase) || errors.Is(err, ErrUndecryptable) || errors.Is(err, ErrNoPassphrase) || errors.Is(err, ErrNotProtected) {
		return err
	}
	r.cur = nil
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	for _, src := range []io.Reader{r.zr, r.plain, r.br} {
		if _, derr := io.CopyBuffer(io.Discard, readerOnly{src}, *bp); derr != nil {
			if derr = r.tarError(derr); errors.Is(derr, ErrCorrupt) {
				return fmt.Errorf("%w (first seen as: %v)", derr, err)
			}
			return err
		}
	}
	return err
}

func (r *reader) close() {
	if r.release != nil {
		r.release()
	}
	if r.stopRA != nil {
		r.stopRA()
	}
	r.f.Close()
}

// checkSumFile compares sum with the <archive>.sha256 file beside the
// archive, when there is one.
func checkSumFile(archive, sum string) error {
	b, err := regfile.ReadFile(archive+".sha256", 1<<20)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s.sha256: %w", archive, err)
	}
	want, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	if want != sum {
		return fmt.Errorf("%w: sha256 %s, %s.sha256 says %s", ErrCorrupt, sum, archive, want)
	}
	return nil
}

// CheckArchivePath opens p as an archive is opened for reading (a regular
// file, never blocking on a FIFO) and closes it: a command checks the
// archive it is given before it changes anything. Its error does not
// repeat p, which the caller names ("restore ARCHIVE: ..."):
// "open archive: no such file or directory", "archive is a directory: not
// a regular file" (errors.Is: fs.ErrNotExist, regfile.ErrNotRegular).
func CheckArchivePath(p string) error {
	f, err := regfile.Open(p)
	if err != nil {
		return archiveOpenError(p, err)
	}
	return f.Close()
}

// archiveOpenError is regfile.Open(p)'s err without p in its text (see
// CheckArchivePath), still matching fs.ErrNotExist or
// regfile.ErrNotRegular as err did.
func archiveOpenError(p string, err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok && pe.Path == p {
		return fmt.Errorf("%s archive: %w", pe.Op, pe.Err)
	}
	if nr, ok := errors.AsType[*regfile.NotRegularError](err); ok && nr.Path == p {
		return fmt.Errorf("archive is %s: %w", nr.What, regfile.ErrNotRegular)
	}
	return fmt.Errorf("open archive: %w", err)
}
