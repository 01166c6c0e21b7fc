// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// sealHeaders seals a box archive of the given headers (bodies empty
// but for regular files, whose body is their name).
func sealHeaders(t *testing.T, path string, pass []byte, hs []*tar.Header) {
	t.Helper()
	var buf bytes.Buffer
	sw, err := seal(&buf, pass)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Name))
		}
		if err := sw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := sw.Write([]byte(h.Name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestUnpackSavedRefusesHostileEntries: a load archive is input; besides
// names outside agent/, a device node (made by dockerd as root in the
// agent's filesystem) and a hard link to a file outside agent/ are
// refused, and a hard link inside agent/ is renamed with its entry, so
// the agent's tar links to workspace/.
func TestUnpackSavedRefusesHostileEntries(t *testing.T) {
	dir := t.TempDir()
	pass := []byte("pw")
	exe := &tar.Header{Typeflag: tar.TypeReg, Name: savedExecutor, Mode: 0o600}
	reg := &tar.Header{Typeflag: tar.TypeReg, Name: "agent/a", Mode: 0o600}
	for name, tc := range map[string]struct {
		h  *tar.Header
		ok bool
	}{
		"link inside":      {&tar.Header{Typeflag: tar.TypeLink, Name: "agent/b", Linkname: "agent/a"}, true},
		"symlink":          {&tar.Header{Typeflag: tar.TypeSymlink, Name: "agent/s", Linkname: "/etc/passwd"}, true},
		"link outside":     {&tar.Header{Typeflag: tar.TypeLink, Name: "agent/b", Linkname: "etc/shadow"}, false},
		"link climbing":    {&tar.Header{Typeflag: tar.TypeLink, Name: "agent/b", Linkname: "agent/../etc/shadow"}, false},
		"link absolute":    {&tar.Header{Typeflag: tar.TypeLink, Name: "agent/b", Linkname: "/etc/shadow"}, false},
		"char device":      {&tar.Header{Typeflag: tar.TypeChar, Name: "agent/mem", Devmajor: 1, Devminor: 1, Mode: 0o666}, false},
		"block device":     {&tar.Header{Typeflag: tar.TypeBlock, Name: "agent/sda", Devmajor: 8, Mode: 0o666}, false},
		"absolute name":    {&tar.Header{Typeflag: tar.TypeReg, Name: "/agent/x", Mode: 0o600}, false},
		"dotdot name":      {&tar.Header{Typeflag: tar.TypeReg, Name: "agent/../../x", Mode: 0o600}, false},
		"executor twice":   {&tar.Header{Typeflag: tar.TypeReg, Name: savedExecutor, Mode: 0o600}, false},
		"executor symlink": {&tar.Header{Typeflag: tar.TypeSymlink, Name: savedExecutor, Linkname: "/etc/shadow"}, false},
	} {
		arch := filepath.Join(dir, name+".gpg")
		h := *tc.h
		sealHeaders(t, arch, pass, []*tar.Header{exe, reg, &h})
		out := filepath.Join(dir, "out-"+name)
		if err := os.Mkdir(out, 0o700); err != nil {
			t.Fatal(err)
		}
		err := unpackSaved(arch, pass, out)
		if tc.ok != (err == nil) {
			t.Errorf("%s: unpackSaved = %v, want ok=%v", name, err, tc.ok)
			continue
		}
		if err != nil || tc.h.Typeflag != tar.TypeLink {
			continue
		}
		f, err := os.Open(filepath.Join(out, "agent.tar"))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(f)
		for {
			got, err := tr.Next()
			if err != nil {
				break
			}
			if got.Typeflag == tar.TypeLink && got.Linkname != "workspace/a" {
				t.Errorf("%s: agent.tar links %s to %q, want workspace/a", name, got.Name, got.Linkname)
			}
		}
		f.Close()
	}
}

// TestReadPassphraseRefusesWhatIsNotAFile: a --passphrase-file that is a
// FIFO (mode 0600, so the mode check passes) is refused at once rather
// than blocking hbx box load for ever; a huge file is refused.
func TestReadPassphraseRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, bytes.Repeat([]byte("x"), 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]string{"fifo": fifo, "huge": huge, "directory": dir} {
		done := make(chan error, 1)
		go func() { _, err := readPassphrase(p); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: readPassphrase = %v, want ErrInvalid", name, err)
			}
		case <-time.After(time.Minute):
			// Unblock the reader before failing.
			if w, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
				w.Close()
			}
			t.Errorf("%s: readPassphrase blocked for a minute", name)
		}
	}
	// No --passphrase-file at all: say the flag, not "stat : no such file".
	if _, err := readPassphrase(""); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "--passphrase-file is required") {
		t.Errorf(`readPassphrase("") = %v, want ErrInvalid naming --passphrase-file`, err)
	}
}

// TestSaveRefusesAnOutputInTheBoxRoot: an archive written into a box
// directory (`hbx box save` run from inside it, as plain `docker compose`
// invites) would be deleted by the `hbx box rm` a save usually precedes;
// Save refuses any output under the root, before the box is touched.
func TestSaveRefusesAnOutputInTheBoxRoot(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "boxes")
	writeTestBox(t, root, "alice", "BOX=alice\nHOST_PORT=4788\n")
	if err := os.WriteFile(filepath.Join(root, "alice", PassFile), []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(parent, "link")
	if err := os.Symlink(filepath.Join(root, "alice"), link); err != nil {
		t.Fatal(err)
	}
	d := Docker{Program: filepath.Join(parent, "no-docker")}
	for name, out := range map[string]string{
		"in the box":        filepath.Join(root, "alice", "alice.box.tar.gz.gpg"),
		"in the root":       filepath.Join(root, "alice.box.tar.gz.gpg"),
		"through a symlink": filepath.Join(link, "a.gpg"),
	} {
		if _, err := d.Save(context.Background(), root, "alice", out); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Save = %v, want ErrInvalid", name, err)
		}
	}
	for _, dir := range []string{root, filepath.Join(root, "alice")} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.Contains(e.Name(), "gpg") {
				t.Errorf("a refused save left %s in %s", e.Name(), dir)
			}
		}
	}
}
