// SPDX-License-Identifier: Apache-2.0

package pgpsym

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/ProtonMail/go-crypto/openpgp/s2k"
)

// TestEncryptWritesTheProfile: the first packet is a v4 symmetric-key
// session key with AES-256 and an iterated, salted SHA-256 S2K, the data
// packet has an MDC, and the message reads back with ReadConfig and the
// same passphrase (only).
func TestEncryptWritesTheProfile(t *testing.T) {
	pass := []byte("correct horse")
	var buf bytes.Buffer
	w, err := Encrypt(&buf, pass, "data.tar.gz", time.Unix(1700000000, 0))
	if err != nil {
		t.Fatalf("Encrypt() = %v", err)
	}
	if _, err := io.WriteString(w, "payload"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}

	pr := packet.NewReader(bytes.NewReader(buf.Bytes()))
	p, err := pr.Next()
	if err != nil {
		t.Fatalf("first packet: %v", err)
	}
	ske, ok := p.(*packet.SymmetricKeyEncrypted)
	if !ok {
		t.Fatalf("first packet = %T, want *packet.SymmetricKeyEncrypted", p)
	}
	if ske.Version != 4 || ske.CipherFunc != packet.CipherAES256 {
		t.Errorf("session key packet = v%d cipher %v, want v4 AES-256", ske.Version, ske.CipherFunc)
	}
	if WriteConfig.S2KConfig.S2KMode != s2k.IteratedSaltedS2K || WriteConfig.S2KConfig.EncodedCount() != 255 {
		t.Errorf("S2K = mode %v count byte %d, want iterated salted, 255 (the largest)", WriteConfig.S2KConfig.S2KMode, WriteConfig.S2KConfig.EncodedCount())
	}
	p, err = pr.Next()
	if err != nil {
		t.Fatalf("second packet: %v", err)
	}
	if se, ok := p.(*packet.SymmetricallyEncrypted); !ok || !se.IntegrityProtected {
		t.Errorf("data packet = %T %+v, want an integrity-protected SymmetricallyEncrypted", p, p)
	}

	read := func(try []byte) (string, error) {
		asked := false
		prompt := func([]openpgp.Key, bool) ([]byte, error) {
			if asked {
				return nil, io.ErrUnexpectedEOF
			}
			asked = true
			return try, nil
		}
		md, err := openpgp.ReadMessage(bytes.NewReader(buf.Bytes()), nil, prompt, ReadConfig)
		if err != nil {
			return "", err
		}
		got, err := io.ReadAll(md.UnverifiedBody)
		return string(got), err
	}
	if got, err := read(pass); err != nil || got != "payload" {
		t.Errorf("read with the passphrase = %q, %v; want \"payload\", nil", got, err)
	}
	if _, err := read([]byte("wrong")); err == nil {
		t.Error("read with a wrong passphrase succeeded")
	}
}

// TestEncryptRefusesEmptyPassphrase: nothing is written for an empty one.
func TestEncryptRefusesEmptyPassphrase(t *testing.T) {
	var buf bytes.Buffer
	if _, err := Encrypt(&buf, nil, "x", time.Now()); err == nil {
		t.Fatal("Encrypt(empty passphrase) = nil error")
	}
	if buf.Len() != 0 {
		t.Errorf("Encrypt(empty passphrase) wrote %d bytes", buf.Len())
	}
}
