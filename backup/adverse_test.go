package backup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"

	"github.com/hermesbox/hbx/internal/testenv"
)

// TestPassphraseFileNULLikeGPG: gpg reads a passphrase file's first line
// as a C string, so a NUL byte ends the passphrase (a file made with
// head -c 32 /dev/urandom has one about one time in nine). hbx must read
// the same bytes, or archives do not cross over with the same file; and
// archives earlier hbx versions wrote with the whole line (NUL included,
// with or without a trailing "\r") still open, with a note.
func TestPassphraseFileNULLikeGPG(t *testing.T) {
	g := newGPG(t, nil)
	if err := os.WriteFile(g.passFile, []byte("s3cret\x00horse\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := ReadPassphraseFile(g.passFile)
	if err != nil {
		t.Fatal(err)
	}
	b := newBox(t)
	write(t, b.data, "f 0600 hello")
	res := b.backup(func(o *Options) { o.Passphrase = p })
	// hbx -> gpg
	if _, err := g.run(nil, "--decrypt", res.Path); err != nil {
		t.Errorf("gpg --passphrase-file --decrypt (hbx's archive, passphrase read as %q): %v", p, err)
	}
	// gpg -> hbx
	arch := filepath.Join(t.TempDir(), "gpg.tar.gz.gpg")
	sh(t, `tar -czf "$T" -C "$D" .`, "T="+arch+".plain", "D="+b.data)
	if _, err := g.run(nil, "--symmetric", "--cipher-algo", "AES256", "-o", arch, arch+".plain"); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(context.Background(), withPass(b.restoreOptions(arch), g.passFile)); err != nil {
		t.Errorf("Restore(gpg's archive) = %v", err)
	}
	// Archives of earlier hbx versions: keyed with the whole line.
	plain := b.backup(func(o *Options) { o.Encrypt = false })
	tgz, err := os.ReadFile(plain.Path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, key string }{
		{"whole line", "s3cret\x00horse\n", "s3cret\x00horse"},
		{"whole line without its CR", "s3cret\x00horse\r\n", "s3cret\x00horse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			legacy := filepath.Join(t.TempDir(), "legacy.tar.gz.gpg")
			var buf bytes.Buffer
			w, err := openpgp.SymmetricallyEncrypt(&buf, []byte(tc.key), &openpgp.FileHints{IsBinary: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(tgz)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(legacy, buf.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(g.passFile, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			vr, err := Verify(context.Background(), legacy, func() ([]byte, error) { return ReadPassphraseFile(g.passFile) })
			if err != nil {
				t.Fatalf("Verify(archive keyed with %q) = %v", tc.key, err)
			}
			if len(vr.Notes) != 1 || !strings.Contains(vr.Notes[0], "as earlier hbx versions read it") {
				t.Errorf("Verify notes = %q, want one naming the earlier form", vr.Notes)
			}
		})
	}
	// A file that starts with NUL is an empty passphrase to gpg: refused.
	if err := os.WriteFile(g.passFile, []byte("\x00horse\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPassphraseFile(g.passFile); !errors.Is(err, ErrNoPassphrase) {
		t.Errorf("ReadPassphraseFile(NUL first) = %v, want ErrNoPassphrase", err)
	}
}

// TestDamagedSidecarIsNotBlamedOnTheArchive: a wrong passphrase on an
// intact archive whose .sha256 file is damaged (a digit changed, emptied,
// cut short) must not be reported as "the archive's bytes changed": the
// operator would throw a good backup away. The .json file beside it still
// holds the archive's sha256.
func TestDamagedSidecarIsNotBlamedOnTheArchive(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "f 0600 hello")
	res := b.backup(nil)
	sum, err := os.ReadFile(res.Path + ".sha256")
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), sum...)
	if flipped[0] == 'a' {
		flipped[0] = 'b'
	} else {
		flipped[0] = 'a'
	}
	for _, tc := range []struct{ name, sidecar string }{
		{"digit changed", string(flipped)},
		{"empty", ""},
		{"cut short", string(sum[:20])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(res.Path+".sha256", []byte(tc.sidecar), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Verify(context.Background(), res.Path, passFunc([]byte("wrong")))
			if err == nil || errors.Is(err, ErrCorrupt) || strings.Contains(err.Error(), "bytes changed") {
				t.Errorf("Verify(wrong passphrase, intact archive, damaged .sha256) = %v; want the passphrase or the sidecar named, not the archive's bytes", err)
			}
		})
	}
}

// TestNonUTF8ExtraPath: an extra path (backup.paths, e.g. from
// HBX_BACKUP_PATHS) whose name is not valid UTF-8 is a name like any
// other: the backup verifies and the restore puts it back. The manifest's
// "paths" and "data_dir" are plain JSON strings, which turn the bytes
// into U+FFFD.
func TestNonUTF8ExtraPath(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "ok 0600 fine")
	extra := filepath.Join(t.TempDir(), "caf\xe9")
	if err := os.Mkdir(extra, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(extra, "x"), []byte("extra"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Create(context.Background(), func() Options { o := b.options(); o.Paths = []string{extra}; return o }())
	if err != nil {
		t.Fatalf("Create(extra path %q) = %v", extra, err)
	}
	if err := os.RemoveAll(extra); err != nil {
		t.Fatal(err)
	}
	ro := b.restoreOptions(res.Path)
	ro.AllowedPaths = []string{extra}
	if _, err := Restore(context.Background(), ro); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(extra, "x")); err != nil || string(got) != "extra" {
		t.Errorf("restored extra file = %q, %v", got, err)
	}
}

// TestRestoreFullDisk: a restore whose staging fills the data directory's
// filesystem (a 16 MiB tmpfs, 24 MiB of data in a plain tar.gz without a
// manifest, so no size is known ahead) fails in one line naming
// the limit the free space sets, and leaves the data directory as it was and no
// staging or journal beside it.
func TestRestoreFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "mounting a tmpfs needs root")
	}
	b := newBox(t)
	write(t, b.data, "big bytes 25165824 3")
	plain := filepath.Join(t.TempDir(), "plain.tar.gz")
	sh(t, `tar -czf "$T" -C "$D" .`, "T="+plain, "D="+b.data)
	mnt := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt).CombinedOutput(); err != nil {
		// Not a missing prerequisite: root in a container may not mount.
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	data := filepath.Join(mnt, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, data, "keep 0600 old data")
	ro := b.restoreOptions(plain)
	ro.DataDir = data
	_, err := Restore(context.Background(), ro)
	t.Logf("Restore() = %v", err)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "nothing changed") {
		t.Errorf("Restore() onto a full filesystem = %v; want one line saying nothing changed", err)
	}
	ents, _ := os.ReadDir(mnt)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != "data" {
		t.Errorf("beside the data directory: %q; want only data", names)
	}
	if got, err := os.ReadFile(filepath.Join(data, "keep")); err != nil || string(got) != "old data" {
		t.Errorf("data/keep = %q, %v; want the old data untouched", got, err)
	}
}

// TestManifestSkippedChecked: the manifest's "skipped" entries are printed
// by hbx restore and hbx backup verify ("not in the archive: %q (%s)"):
// a hostile archive's type there must be one of the skipped types (not
// terminal escapes and fake output lines) and its path a clean relative
// one, like the files' entries.
func TestManifestSkippedChecked(t *testing.T) {
	for _, sk := range []string{
		`{"path":"x","type":"fifo)\n\u001b[2Jok: restored"}`,
		`{"path":"x","type":"file"}`,
		`{"path":"../../etc/x","type":"fifo"}`,
	} {
		m := `{"format":1,"created":"2026-01-01T00:00:00Z","hbx_version":"x","data_dir":"/d","files":[{"path":".","type":"dir","mode":448}],"skipped":[` + sk + `]}`
		if _, err := parseManifest([]byte(m)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("parseManifest(skipped %s) = %v, want ErrCorrupt", sk, err)
		}
	}
	ok := `{"format":1,"created":"2026-01-01T00:00:00Z","hbx_version":"x","data_dir":"/d","files":[{"path":".","type":"dir","mode":448}],"skipped":[{"path":"s","type":"socket"},{"path":".hbx-paths/srv/f","type":"fifo"}]}`
	if _, err := parseManifest([]byte(ok)); err != nil {
		t.Errorf("parseManifest(good skipped) = %v", err)
	}
}
