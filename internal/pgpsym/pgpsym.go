// SPDX-License-Identifier: Apache-2.0

// Package pgpsym is the one OpenPGP profile hbx writes and reads:
// messages encrypted with a passphrase (RFC 4880 section 5.3 and 5.13),
// as `gpg --symmetric` makes them. hbx backup's archives and hbx box
// save's box archives both use it, so a file either writes opens with
// `gpg -d` and with the other.
//
// Written: a v4 Symmetric-Key Encrypted Session Key packet (AES-256, an
// iterated and salted SHA-256 S2K at the largest count OpenPGP encodes)
// and a v1 Symmetrically Encrypted Integrity Protected Data packet (MDC),
// no OpenPGP compression (the payload is a compressed tar stream). Every
// gpg from Debian's 2.2 on reads it.
//
// Read: messages with integrity protection only (MDC, or the v5 OCB AEAD
// packets GnuPG 2.4 writes); a message without it is refused by the
// library. Importing the package enables go-crypto's v5 packet parsing
// (packet.V5Disabled = false) for the whole process: hbx only decrypts
// with passphrases, so nothing else it does changes.
//
// The package does not guarantee anything about the passphrase's
// strength; callers read it from a private file (internal/regfile).
package pgpsym

import (
	"crypto"
	"fmt"
	"io"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/ProtonMail/go-crypto/openpgp/s2k"
)

func init() {
	// GnuPG 2.4 encrypts with a v5 Symmetric-Key Encrypted Session Key
	// packet and an OCB AEAD Encrypted Data packet (LibrePGP); go-crypto
	// parses v5 packets only when this is off (its "v5" build tag).
	packet.V5Disabled = false
}

// S2KCount is the iteration count of the S2K written: the largest
// OpenPGP can encode (65011712 bytes hashed), what gpg picks on fast
// machines.
const S2KCount = 65011712

// WriteConfig is the configuration every hbx message is written with
// (see the package comment). Callers must not modify it.
var WriteConfig = &packet.Config{
	DefaultCipher:          packet.CipherAES256,
	DefaultHash:            crypto.SHA256,
	DefaultCompressionAlgo: packet.CompressionNone,
	S2KConfig:              &s2k.Config{S2KMode: s2k.IteratedSaltedS2K, Hash: crypto.SHA256, S2KCount: S2KCount},
}

// ReadConfig is the configuration every hbx message is read with: it
// refuses messages without integrity protection (the library's default,
// spelled out). Callers must not modify it.
var ReadConfig = &packet.Config{InsecureAllowUnauthenticatedMessages: false}

// Encrypt returns a writer whose output, written to w, is an OpenPGP
// message encrypted with passphrase, its literal data packet named name
// with modification time mtime. Close finishes the message (the MDC) but
// does not close w. An empty passphrase is refused.
func Encrypt(w io.Writer, passphrase []byte, name string, mtime time.Time) (io.WriteCloser, error) {
	if len(passphrase) == 0 {
		return nil, fmt.Errorf("start encryption: empty passphrase")
	}
	pw, err := openpgp.SymmetricallyEncrypt(w, passphrase, &openpgp.FileHints{IsBinary: true, FileName: name, ModTime: mtime}, WriteConfig)
	if err != nil {
		return nil, fmt.Errorf("start encryption: %w", err)
	}
	return pw, nil
}
