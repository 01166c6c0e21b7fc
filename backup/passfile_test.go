package backup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// passFileCases are passphrase files and what `gpg --passphrase-file`
// reads from them (checked against the real gpg 2.2 below): the first line
// up to "\n", nothing stripped.
var passFileCases = []struct{ name, content, want string }{
	{"crlf", "s3cret horse\r\n", "s3cret horse\r"},
	{"trailing spaces", "s3cret horse  \n", "s3cret horse  "},
	{"leading tab", "\ts3cret horse\n", "\ts3cret horse"},
	{"no final newline", "s3cret horse", "s3cret horse"},
	{"second line ignored", "s3cret horse\nother\n", "s3cret horse"},
	{"crlf no newline", "s3cret horse\r", "s3cret horse\r"},
}

// TestPassphraseFileLikeGPG: hbx reads a passphrase file as gpg does, so
// an archive hbx encrypts decrypts with `gpg --passphrase-file` on the
// same file, and one gpg encrypts restores with hbx, for every shape.
func TestPassphraseFileLikeGPG(t *testing.T) {
	for _, tc := range passFileCases {
		t.Run(tc.name, func(t *testing.T) {
			g := newGPG(t, nil)
			if err := os.WriteFile(g.passFile, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			p, err := ReadPassphraseFile(g.passFile)
			if err != nil || string(p) != tc.want {
				t.Fatalf("ReadPassphraseFile(%q) = %q, %v; want %q", tc.content, p, err, tc.want)
			}
			b := newBox(t)
			write(t, b.data, "f 0600 hello")
			res := b.backup(func(o *Options) { o.Passphrase = p })
			// hbx -> gpg
			if _, err := g.run(nil, "--decrypt", res.Path); err != nil {
				t.Errorf("gpg --passphrase-file --decrypt (hbx's archive): %v", err)
			}
			// gpg -> hbx
			arch := filepath.Join(t.TempDir(), "gpg.tar.gz.gpg")
			sh(t, `tar -czf "$T" -C "$D" .`, "T="+arch+".plain", "D="+b.data)
			if _, err := g.run(nil, "--symmetric", "--cipher-algo", "AES256", "-o", arch, arch+".plain"); err != nil {
				t.Fatal(err)
			}
			rr, err := Restore(context.Background(), withPass(b.restoreOptions(arch), g.passFile))
			if err != nil {
				t.Fatalf("Restore(gpg's archive) = %v", err)
			}
			if strings.Contains(strings.Join(rr.Notes, "\n"), `"\r"`) {
				t.Errorf("Restore notes %q mention the legacy form; gpg's archive needs none", rr.Notes)
			}
		})
	}
}

// withPass reads the passphrase from file, as the CLI does.
func withPass(o RestoreOptions, file string) RestoreOptions {
	o.Passphrase = func() ([]byte, error) { return ReadPassphraseFile(file) }
	return o
}

// TestLegacyCRLFArchives: an archive an earlier hbx wrote with the "\r" of
// a CRLF passphrase file stripped still verifies and restores with that
// file, and the result says it used the legacy form.
func TestLegacyCRLFArchives(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "f 0600 hello")
	file := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(file, []byte("s3cret horse\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := b.backup(func(o *Options) { o.Passphrase = []byte("s3cret horse") })
	vr, err := Verify(context.Background(), res.Path, func() ([]byte, error) { return ReadPassphraseFile(file) })
	if err != nil {
		t.Fatalf("Verify(legacy) = %v", err)
	}
	if len(vr.Notes) != 1 || !strings.Contains(vr.Notes[0], `without its trailing "\r"`) {
		t.Errorf("Verify notes = %q, want one about the trailing \\r", vr.Notes)
	}
	rr, err := Restore(context.Background(), withPass(b.restoreOptions(res.Path), file))
	if err != nil {
		t.Fatalf("Restore(legacy) = %v", err)
	}
	if !strings.Contains(strings.Join(rr.Notes, "\n"), `without its trailing "\r"`) {
		t.Errorf("Restore notes = %q, want one about the trailing \\r", rr.Notes)
	}
	// A really wrong passphrase ending in \r is still wrong.
	if err := os.WriteFile(file, []byte("other\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(context.Background(), res.Path, func() ([]byte, error) { return ReadPassphraseFile(file) }); !errors.Is(err, ErrWrongPassphrase) {
		t.Errorf("Verify(wrong, CRLF) = %v, want ErrWrongPassphrase", err)
	}
}

// TestDecryptErrorsBlameTheRightThing: damaged key packets are not blamed
// on the passphrase when the .sha256 file shows the bytes changed; a wrong
// passphrase on intact bytes is; without the .sha256 file the two cannot
// be told apart and the error says both; a truncated archive is damaged.
func TestDecryptErrorsBlameTheRightThing(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "f 0600 hello", "g bytes 300000 7")
	res := b.backup(nil)
	orig, err := os.ReadFile(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(res.Path + ".sha256")
	if err != nil {
		t.Fatal(err)
	}
	// The v4 SKESK: tag, length, version, cipher, S2K type, hash, then the
	// 8-byte salt. A changed salt byte derives another key, as a wrong
	// passphrase does.
	if orig[2] != 4 || orig[4] != 3 {
		t.Fatalf("archive starts % x, want a v4 SKESK with an iterated S2K", orig[:8])
	}
	damaged := append([]byte(nil), orig...)
	damaged[7] ^= 0x40
	for _, tc := range []struct {
		name    string
		bytes   []byte
		sidecar bool
		pass    []byte
		want    error
		says    string
	}{
		{"damaged header, sidecar", damaged, true, testPass, ErrCorrupt, "the passphrase may be right"},
		{"damaged header, no sidecar", damaged, false, testPass, ErrUndecryptable, "wrong passphrase or damaged archive"},
		{"wrong passphrase, sidecar", orig, true, []byte("wrong"), ErrWrongPassphrase, "wrong passphrase: the archive's bytes match"},
		{"wrong passphrase, no sidecar", orig, false, []byte("wrong"), ErrUndecryptable, "wrong passphrase or damaged archive"},
		{"truncated, sidecar", orig[:len(orig)-1000], true, testPass, ErrCorrupt, ""},
		{"truncated, no sidecar", orig[:len(orig)-1000], false, testPass, ErrCorrupt, "truncated"},
		{"truncated in the header", orig[:10], false, testPass, ErrCorrupt, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), filepath.Base(res.Path))
			if err := os.WriteFile(p, tc.bytes, 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.sidecar {
				if err := os.WriteFile(p+".sha256", sum, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Verify(context.Background(), p, passFunc(tc.pass))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Verify() = %v, want %v saying %q", err, tc.want, tc.says)
			}
			if tc.want != ErrWrongPassphrase && errors.Is(err, ErrWrongPassphrase) {
				t.Errorf("Verify() = %v blames the passphrase alone", err)
			}
			_, err = Restore(context.Background(), withPass(b.restoreOptions(p), writePass(t, tc.pass)))
			if !errors.Is(err, tc.want) {
				t.Errorf("Restore() = %v, want %v", err, tc.want)
			}
		})
	}
}

func writePass(t *testing.T, p []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(f, append(append([]byte(nil), p...), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPassphraseFileFIFO: a FIFO named as the passphrase file is refused
// at once, never waited on.
func TestPassphraseFileFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pass")
	if err := unix.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadPassphraseFile(p); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrPassphraseFile) || !strings.Contains(err.Error(), p+" is a FIFO") {
			t.Errorf("ReadPassphraseFile(fifo) = %v, want ErrPassphraseFile naming %s as a FIFO", err, p)
		}
	case <-time.After(10 * time.Second):
		if f, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("ReadPassphraseFile(fifo) blocked")
	}
}
