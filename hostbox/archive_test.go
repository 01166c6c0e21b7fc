// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestRenameKeepsEntriesUnderTheirRoot(t *testing.T) {
	for name, tc := range map[string]struct {
		in, want string
		ok       bool
	}{
		"root":         {"workspace", "agent", true},
		"root slash":   {"workspace/", "agent", true},
		"dot slash":    {"./workspace/a/b", "agent/a/b", true},
		"nested":       {"workspace/a/b", "agent/a/b", true},
		"other root":   {"etc/passwd", "", false},
		"escape":       {"workspace/../../etc", "", false},
		"absolute":     {"/workspace/a", "", false},
		"prefix trick": {"workspacex/a", "", false},
	} {
		got, err := rename(tc.in, "workspace", "agent")
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("%s: rename(%q) = %q, %v; want %q ok=%v", name, tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// writeSavedArchive seals a box archive with the given entries.
func writeSavedArchive(t *testing.T, path string, pass []byte, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	sw, err := seal(&buf, pass)
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := sw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := sw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestUnpackSaved: an archive seal wrote opens with its passphrase (and
// with the host's gpg), and is refused whole for a wrong passphrase, a
// missing executor archive, an entry outside agent/, or damage.
func TestUnpackSaved(t *testing.T) {
	dir := t.TempDir()
	pass := []byte("correct horse")
	good := filepath.Join(dir, "good.gpg")
	writeSavedArchive(t, good, pass, map[string]string{savedExecutor: "EXE", "agent/marker": "agent-a\n"})
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unpackSaved(good, pass, out); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, savedExecutor)); string(b) != "EXE" {
		t.Errorf("executor archive = %q", b)
	}
	if _, err := exec.LookPath("gpg"); err == nil {
		home := t.TempDir()
		if err := os.Chmod(home, 0o700); err != nil {
			t.Fatal(err)
		}
		passFile := filepath.Join(dir, "pass")
		if err := os.WriteFile(passFile, append(pass, '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-ec", `gpg --batch --no-tty --quiet --pinentry-mode loopback --passphrase-file "$2" -d "$1" | tar -xzO agent/marker`, "sh", good, passFile)
		cmd.Env = append(os.Environ(), "GNUPGHOME="+home)
		if got, err := cmd.Output(); err != nil || string(got) != "agent-a\n" {
			t.Errorf("host gpg -d | tar -xzO agent/marker = %q, %v", got, err)
		}
		_ = exec.Command("gpgconf", "--homedir", home, "--kill", "gpg-agent").Run()
	}

	noExe := filepath.Join(dir, "noexe.gpg")
	writeSavedArchive(t, noExe, pass, map[string]string{"agent/marker": "x"})
	escape := filepath.Join(dir, "escape.gpg")
	writeSavedArchive(t, escape, pass, map[string]string{savedExecutor: "EXE", "etc/cron.d/x": "x"})
	data, _ := os.ReadFile(good)
	damaged := filepath.Join(dir, "damaged.gpg")
	data[len(data)-30] ^= 0xff
	if err := os.WriteFile(damaged, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		path string
		pass []byte
	}{
		"wrong passphrase": {good, []byte("wrong")},
		"no executor":      {noExe, pass},
		"entry outside":    {escape, pass},
		"damaged":          {damaged, pass},
	} {
		o := filepath.Join(dir, "out-"+name)
		if err := os.Mkdir(o, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unpackSaved(tc.path, tc.pass, o); err == nil {
			t.Errorf("%s: unpackSaved succeeded", name)
		}
	}
}
