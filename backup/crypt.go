package backup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"

	"github.com/hermesbox/hbx/internal/pgpsym"
	"github.com/hermesbox/hbx/internal/regfile"
)

// The OpenPGP profile (what is written, what is read) is internal/pgpsym's;
// hbx box save writes its archives with the same one.

// encrypt returns a writer whose output, written to w, is an OpenPGP
// message encrypted with passphrase. Close finishes the message (the MDC)
// but does not close w.
func encrypt(w io.Writer, passphrase []byte, name string, mtime time.Time) (io.WriteCloser, error) {
	passphrase = keyOf(passphrase)
	if len(passphrase) == 0 {
		return nil, ErrNoPassphrase
	}
	return pgpsym.Encrypt(w, passphrase, name, mtime)
}

// isOpenPGP reports whether head starts an OpenPGP message, binary or
// ASCII-armored.
func isOpenPGP(head []byte) bool {
	return len(head) > 0 && head[0]&0x80 != 0 || bytes.HasPrefix(head, []byte("-----BEGIN PGP MESSAGE-----"))
}

// decrypt reads an encrypted OpenPGP message from r and returns its
// plaintext. The plaintext reader reports ErrCorrupt when the integrity
// check fails or the message is cut short; read it to io.EOF before
// trusting anything it gave. pass is called at most once, and only for a
// passphrase-encrypted message with integrity protection.
func decrypt(r *bufio.Reader, pass func() ([]byte, error)) (io.Reader, error) {
	var in io.Reader = r
	if head, _ := r.Peek(5); string(head) == "-----" {
		blk, err := armor.Decode(r)
		if err != nil {
			return nil, fmt.Errorf("%w: ASCII armor: %w", ErrCorrupt, err)
		}
		if blk.Type != "PGP MESSAGE" {
			return nil, fmt.Errorf("%w: ASCII armor holds a %q, not a PGP MESSAGE", ErrCorrupt, blk.Type)
		}
		in = blk.Body
	}
	asked := false
	var askErr error
	prompt := func(_ []openpgp.Key, symmetric bool) ([]byte, error) {
		if !symmetric {
			askErr = fmt.Errorf("%w: the archive is encrypted to a public key, not with a passphrase", ErrNoPassphrase)
			return nil, askErr
		}
		if asked {
			askErr = errBadKey
			return nil, askErr
		}
		asked = true
		p, err := pass()
		if err == nil && len(p) == 0 {
			err = ErrNoPassphrase
		}
		if err != nil {
			askErr = err
			return nil, err
		}
		return p, nil
	}
	md, err := openpgp.ReadMessage(in, nil, prompt, pgpsym.ReadConfig)
	switch {
	case err == nil:
	case askErr != nil:
		return nil, askErr
	case errors.Is(err, pgperrors.ErrKeyIncorrect), errors.Is(err, pgperrors.ErrDecryptSessionKeyParsing):
		// Both mean the key derived from the passphrase does not decrypt
		// the data; go-crypto reports the second when a wrong key's
		// output happens to pass the quick check (a flaky "damaged").
		// Damaged key packets (salt, S2K, encrypted session key) look the
		// same: openArchive tells them apart when it can.
		return nil, errBadKey
	case strings.Contains(err.Error(), "not integrity protected"):
		return nil, fmt.Errorf("%w: it has no MDC or AEAD (an old-style Symmetrically Encrypted Data packet); refusing to read it", ErrNotProtected)
	default:
		return nil, fmt.Errorf("%w: read OpenPGP message: %w", ErrCorrupt, err)
	}
	if !md.IsEncrypted || !md.IsSymmetricallyEncrypted {
		return nil, fmt.Errorf("%w: the OpenPGP message is not encrypted with a passphrase", ErrNotProtected)
	}
	return &plainReader{r: md.UnverifiedBody}, nil
}

// plainReader maps the OpenPGP library's read errors (MDC or AEAD tag
// mismatch, truncation) to ErrCorrupt.
type plainReader struct{ r io.Reader }

func (p *plainReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if err != nil && err != io.EOF {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("%w: encrypted data is cut short (truncated archive?)", ErrCorrupt)
		} else {
			err = fmt.Errorf("%w: encrypted data fails its integrity check (damaged or truncated archive): %w", ErrCorrupt, err)
		}
	}
	return n, err
}

// errBadKey: the key derived from the passphrase does not decrypt the
// message: a wrong passphrase, or damaged key packets. openArchive turns
// it into ErrWrongPassphrase, ErrCorrupt or ErrUndecryptable.
var errBadKey = errors.New("the passphrase does not decrypt the archive")

// ReadPassphraseFile returns the passphrase in path exactly as `gpg
// --passphrase-file` reads it: the bytes of the first line up to the first
// "\n" (or the end of the file), nothing stripped: a "\r" before the "\n"
// (a CRLF file), leading and trailing spaces and tabs are part of the
// passphrase. The file must be a regular file not readable or writable by
// group or others, and the first line must not be empty. Errors wrap
// ErrPassphraseFile (an empty first line, or one that starts with NUL,
// also ErrNoPassphrase) and never quote the content. As in gpg, only the
// bytes before a NUL in the line key the encryption (see keyOf); the line
// is returned whole so restores can retry what earlier hbx versions used. (hbx before this rule stripped one trailing "\r";
// restores retry such archives, see LegacyPassphrase.)
func ReadPassphraseFile(path string) ([]byte, error) {
	f, err := regfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: backup.passphrase_file: %w", ErrPassphraseFile, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: backup.passphrase_file: %w", ErrPassphraseFile, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: backup.passphrase_file %s has mode %04o: it holds secrets and must be 0600 or stricter (chmod 600 %s)", ErrPassphraseFile, path, st.Mode().Perm(), path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("%w: backup.passphrase_file %s: %w", ErrPassphraseFile, path, err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	if len(line) == 0 {
		return nil, fmt.Errorf("%w: backup.passphrase_file %s starts with an empty line (%w)", ErrPassphraseFile, path, ErrNoPassphrase)
	}
	if len(keyOf(line)) == 0 {
		return nil, fmt.Errorf("%w: backup.passphrase_file %s starts with a NUL byte: gpg reads an empty passphrase (%w)", ErrPassphraseFile, path, ErrNoPassphrase)
	}
	return line, nil
}

// keyOf returns the bytes of passphrase p that key the encryption: those
// before its first NUL byte, as gpg uses a passphrase (a C string, cut at
// NUL whether it comes from a file, a prompt or --passphrase).
func keyOf(p []byte) []byte {
	if i := bytes.IndexByte(p, 0); i >= 0 {
		return p[:i]
	}
	return p
}

// LegacyPassphrase returns the form older hbx versions read from a
// passphrase file whose first line ends in "\r" (a CRLF file): the line
// without that "\r". ok is false when p does not end in "\r".
func LegacyPassphrase(p []byte) (legacy []byte, ok bool) {
	if len(p) < 2 || p[len(p)-1] != '\r' {
		return nil, false
	}
	return p[:len(p)-1], true
}
