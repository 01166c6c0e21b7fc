package backup

import (
	"bytes"
	"context"
	"crypto"
	"crypto/aes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ProtonMail/go-crypto/ocb"
	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/ProtonMail/go-crypto/openpgp/s2k"
)

// pgpPacket frames body as a new-format OpenPGP packet (RFC 9580 4.2).
func pgpPacket(tag byte, body []byte) []byte {
	out := []byte{0xc0 | tag}
	switch n := len(body); {
	case n < 192:
		out = append(out, byte(n))
	case n < 8384:
		n -= 192
		out = append(out, byte(n>>8)+192, byte(n))
	default:
		out = append(out, 0xff)
		out = binary.BigEndian.AppendUint32(out, uint32(n))
	}
	return append(out, body...)
}

// librePGPMessage builds what GnuPG 2.4 writes for `gpg --symmetric` by
// default (LibrePGP, draft-koch-librepgp): a v5 Symmetric-Key Encrypted
// Session Key packet (AES-256, OCB, iterated and salted S2K) and an OCB
// AEAD Encrypted Data packet (tag 20), in chunks of 2^(chunkByte+6) bytes,
// holding a literal data packet of body. Debian 12's gpg 2.2 cannot write
// it; this follows the draft's packet layout.
func librePGPMessage(t *testing.T, pass, body []byte, chunkByte byte) []byte {
	t.Helper()
	const cipherAES256, modeOCB = 9, 2
	sessionKey := make([]byte, 32)
	rand.Read(sessionKey)

	var spec bytes.Buffer
	kek := make([]byte, 32)
	if err := s2k.Serialize(&spec, kek, rand.Reader, pass, &s2k.Config{S2KMode: s2k.IteratedSaltedS2K, Hash: crypto.SHA256, S2KCount: 65536}); err != nil {
		t.Fatal(err)
	}
	kekBlock, _ := aes.NewCipher(kek)
	kekAEAD, err := ocb.NewOCB(kekBlock)
	if err != nil {
		t.Fatal(err)
	}
	iv := make([]byte, 15)
	rand.Read(iv)
	skesk := append([]byte{5, cipherAES256, modeOCB}, spec.Bytes()...)
	skesk = append(skesk, iv...)
	skesk = append(skesk, kekAEAD.Seal(nil, iv, sessionKey, []byte{0xc3, 5, cipherAES256, modeOCB})...)

	literal := pgpPacket(11, append([]byte{'b', 0, 0, 0, 0, 0}, body...))
	block, _ := aes.NewCipher(sessionKey)
	aead, err := ocb.NewOCB(block)
	if err != nil {
		t.Fatal(err)
	}
	nonce0 := make([]byte, 15)
	rand.Read(nonce0)
	ad := []byte{0xd4, 1, cipherAES256, modeOCB, chunkByte}
	nonceAt := func(i uint64) []byte {
		n := append([]byte(nil), nonce0...)
		var idx [8]byte
		binary.BigEndian.PutUint64(idx[:], i)
		for j := range 8 {
			n[7+j] ^= idx[j]
		}
		return n
	}
	enc := append([]byte{1, cipherAES256, modeOCB, chunkByte}, nonce0...)
	size := 1 << (chunkByte + 6)
	var i uint64
	for off := 0; off < len(literal); off += size {
		chunk := literal[off:min(off+size, len(literal))]
		enc = append(enc, aead.Seal(nil, nonceAt(i), chunk, binary.BigEndian.AppendUint64(append([]byte(nil), ad...), i))...)
		i++
	}
	final := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(append([]byte(nil), ad...), i), uint64(len(literal)))
	enc = append(enc, aead.Seal(nil, nonceAt(i), nil, final)...)
	return append(pgpPacket(3, skesk), pgpPacket(20, enc)...)
}

// TestReadsAEADArchives: archives encrypted the way GnuPG 2.4 does (OCB,
// v5 SKESK) and the way RFC 9580 implementations do (SEIPD v2) verify and
// restore; a flipped byte in their ciphertext, a missing final tag and a
// wrong passphrase are refused.
func TestReadsAEADArchives(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "a 0644 alpha", "big bytes 5000 7")
	res := b.backup(func(o *Options) { o.Encrypt = false })
	tgz, err := os.ReadFile(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	var rfc9580 bytes.Buffer
	w, err := openpgp.SymmetricallyEncrypt(&rfc9580, testPass, &openpgp.FileHints{IsBinary: true}, &packet.Config{
		DefaultCipher: packet.CipherAES256, AEADConfig: &packet.AEADConfig{DefaultMode: packet.AEADModeOCB},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(tgz)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	libre := librePGPMessage(t, testPass, tgz, 4)
	for _, tc := range []struct {
		name string
		msg  []byte
		pass []byte
		want error
	}{
		{"gpg 2.4 (LibrePGP OCB, v5 SKESK)", libre, testPass, nil},
		{"RFC 9580 (SEIPD v2, v6 SKESK)", rfc9580.Bytes(), testPass, nil},
		{"gpg 2.4, flipped ciphertext byte", flipAt(libre, len(libre)/2), testPass, ErrCorrupt},
		{"gpg 2.4, final tag cut off", libre[:len(libre)-16], testPass, ErrCorrupt},
		{"gpg 2.4, wrong passphrase", libre, []byte("wrong"), ErrUndecryptable},
		{"RFC 9580, flipped ciphertext byte", flipAt(rfc9580.Bytes(), rfc9580.Len()/2), testPass, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "a.tar.gz.gpg")
			if err := os.WriteFile(p, tc.msg, 0o600); err != nil {
				t.Fatal(err)
			}
			vr, err := Verify(context.Background(), p, passFunc(tc.pass))
			if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Fatalf("Verify() = %v, want %v", err, tc.want)
			}
			if err == nil && (vr.Manifest == nil || vr.Files != 2 || !vr.Encrypted) {
				t.Errorf("Verify() = %+v, want the manifest and 2 files", vr)
			}
		})
	}
}

func flipAt(b []byte, at int) []byte {
	c := append([]byte(nil), b...)
	c[at] ^= 1
	return c
}
