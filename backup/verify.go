package backup

import (
	"context"
	"fmt"
	"io"
)

// VerifyResult is what Verify read.
type VerifyResult struct {
	Path        string
	Size        int64  // bytes of the archive file
	SHA256      string // hex sha256 of the archive file
	Encrypted   bool
	Compression string    // "gzip", "zstd" or "none"
	Manifest    *Manifest // nil for an archive without one
	Entries     int       // tar entries after the manifest
	Files       int       // regular files among them
	Bytes       int64     // their content bytes
	// Unchecked says what could not be checked: for an archive without a
	// manifest, file contents, modes and completeness.
	Unchecked []string
	// Notes say how the archive was read when that needs telling (it
	// decrypted only with the legacy passphrase form).
	Notes []string
	// SymlinksOut are the archive paths of the data directory's symlinks
	// that resolve out of it, through other symlinks or not, or in a
	// loop: a restore refuses them when the archive is not authenticated
	// (not Encrypted), see PlanVerified.
	SymlinksOut []string
}

// PlanVerified is PlanRestore for a verified archive, refusing also what
// the staging finds first (an unauthenticated archive's symlinks out of
// the data directory).
func PlanVerified(opts RestoreOptions, res *VerifyResult) *RestorePlan {
	p := PlanRestore(opts, res.Manifest, res.Encrypted)
	if p.err == nil && !res.Encrypted && len(res.SymlinksOut) > 0 {
		p.refuse(&entryError{path: res.SymlinksOut[0], err: fmt.Errorf("%w: symlink resolves out of the restored directory or in a loop, which an archive that is not authenticated may not plant (%d such)", ErrImageRefused, len(res.SymlinksOut))})
	}
	return p
}

// Verify decrypts, decompresses and reads the archive at path to its end
// without writing anything, and checks every entry against the manifest
// (see reader). The error names the first bad entry (BadEntry) and wraps
// ErrWrongPassphrase, ErrUndecryptable, ErrNotProtected, ErrCorrupt,
// ErrMismatch or extract.ErrUnsafePath.
func Verify(ctx context.Context, path string, pass PassphraseFunc) (*VerifyResult, error) {
	r, err := openArchive(path, pass)
	if err != nil {
		return nil, err
	}
	defer r.close()
	var links linkTree
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hdr, err := r.next()
		if err == io.EOF {
			break
		} else if err != nil {
			return nil, r.explain(err)
		}
		if !r.Encrypted {
			links.add(hdr)
		}
	}
	size, sum, err := r.finish()
	if err != nil {
		return nil, r.explain(err)
	}
	res := &VerifyResult{Path: path, Size: size, SHA256: sum, Encrypted: r.Encrypted, Compression: r.Compressed,
		Manifest: r.Manifest, Entries: r.Entries, Files: r.Files, Bytes: r.Bytes, Notes: r.Notes, SymlinksOut: links.outside()}
	if r.Manifest == nil {
		res.Unchecked = append(res.Unchecked, fmt.Sprintf("the archive has no %s: file contents, modes and completeness could not be checked, only that it decrypts, decompresses and reads as tar to its end", ManifestName))
	}
	return res, nil
}
