package backup

import (
	"bytes"
	"context"
	"crypto"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/ProtonMail/go-crypto/openpgp/s2k"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/internal/tartest"
)

// cheapEncrypt encrypts like hbx backup but with a cheap S2K, so the
// fuzzer spends its time in parsing, not in key derivation.
func cheapEncrypt(t testing.TB, plain []byte) []byte {
	var out bytes.Buffer
	w, err := openpgp.SymmetricallyEncrypt(&out, testPass, &openpgp.FileHints{IsBinary: true}, &packet.Config{
		DefaultCipher: packet.CipherAES256, DefaultCompressionAlgo: packet.CompressionNone,
		S2KConfig: &s2k.Config{S2KMode: s2k.IteratedSaltedS2K, Hash: crypto.SHA256, S2KCount: 1024},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(plain)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// FuzzVerify feeds arbitrary bytes to the backup decrypt and read path
// (OpenPGP, gzip/zstd, tar, manifest). It must never panic, and every
// refusal must be one of the documented errors.
func FuzzVerify(f *testing.F) {
	tgz := sealed(&testing.T{}, withManifest(File{Path: ".", Type: TypeDir, Mode: 0o700}, File{Path: "a", Type: TypeFile, Mode: 0o644, Size: 5, SHA256: sum("alpha")}).
		Dir("./", 0o700).File("./a", "alpha", 0o644).Bytes(), false)
	f.Add(tgz)
	f.Add(cheapEncrypt(f, tgz))
	f.Add(cheapEncrypt(f, tartest.New().Dir("./", 0o700).Symlink("l", "/").File("l/x", "x", 0o644).Bytes()))
	f.Add([]byte("-----BEGIN PGP MESSAGE-----\n\njA0ECQMC\n-----END PGP MESSAGE-----\n"))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0})
	known := []error{ErrCorrupt, ErrMismatch, ErrWrongPassphrase, ErrUndecryptable, ErrNoPassphrase, ErrNotProtected,
		extract.ErrUnsafePath, extract.ErrBadLink, extract.ErrUnsupportedType}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "fuzz.tar.gz.gpg")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Verify(context.Background(), p, passFunc(testPass))
		if err == nil {
			return
		}
		for _, k := range known {
			if errors.Is(err, k) {
				return
			}
		}
		t.Fatalf("Verify() = %v, want one of the documented errors", err)
	})
}
