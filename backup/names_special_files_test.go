package backup

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestNonUTF8Names: names are bytes. A file, a directory and a symlink
// target that are not valid UTF-8 are archived, verified and restored
// exactly; the manifest carries them as path_b64/link_b64.
func TestNonUTF8Names(t *testing.T) {
	b := newBox(t)
	bad := "caf\xe9"      // Latin-1 "café"
	worse := "\xff\xfe-x" // no encoding at all
	write(t, b.data, "ok 0600 fine")
	if err := os.Mkdir(filepath.Join(b.data, worse), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.data, worse, bad), []byte("latin-1 name"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../"+bad+"\x80", filepath.Join(b.data, "link\xc3")); err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, b.data)
	res := b.backup(nil)
	if _, err := Verify(context.Background(), res.Path, passFunc(testPass)); err != nil {
		t.Fatalf("Verify() = %v", err)
	}
	if err := os.RemoveAll(filepath.Join(b.data, worse)); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(context.Background(), b.restoreOptions(res.Path)); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	got := snapshot(t, b.data)
	if !slices.Equal(withoutRoot(got), withoutRoot(want)) {
		t.Errorf("restored tree = %q, want %q", withoutRoot(got), withoutRoot(want))
	}
	if b, err := os.ReadFile(filepath.Join(b.data, worse, bad)); err != nil || string(b) != "latin-1 name" {
		t.Errorf("ReadFile(%q) = %q, %v", worse+"/"+bad, b, err)
	}
	if l, err := os.Readlink(filepath.Join(b.data, "link\xc3")); err != nil || l != "../"+bad+"\x80" {
		t.Errorf("Readlink = %q, %v; want %q", l, err, "../"+bad+"\x80")
	}
}

// TestManifestNames: a manifest with plain "path" entries (every archive
// before path_b64) still parses; one with invalid UTF-8 round-trips.
func TestManifestNames(t *testing.T) {
	old := `{"format":1,"created":"2026-01-01T00:00:00Z","hbx_version":"x","data_dir":"/d","files":[{"path":".","type":"dir","mode":448},{"path":"a/b","type":"symlink","mode":511,"link":"c"}]}`
	m, err := parseManifest([]byte(old))
	if err != nil || len(m.Files) != 2 || m.Files[1].Path != "a/b" || m.Files[1].Link != "c" {
		t.Fatalf("parseManifest(old) = %+v, %v", m, err)
	}
	m.Files = append(m.Files, File{Path: "x\xff", Type: TypeSymlink, Link: "\xfe"})
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "\\ufffd") || !strings.Contains(string(b), `"path_b64":"eP8="`) {
		t.Errorf("Marshal = %s, want path_b64 and no U+FFFD", b)
	}
	m2, err := parseManifest(b)
	if err != nil || m2.Files[2].Path != "x\xff" || m2.Files[2].Link != "\xfe" {
		t.Errorf("parseManifest(Marshal) = %+v, %v", m2, err)
	}
	if _, err := parseManifest([]byte(`{"format":1,"files":[{"path":"a","path_b64":"YQ==","type":"dir"}]}`)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("parseManifest(both forms) = %v, want ErrCorrupt", err)
	}
}

// TestSkippedTypes: fifos and sockets are left out, listed in the result,
// in the manifest and in the restore's notes.
func TestSkippedTypes(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "db/ 0700", "db/x 0600 data")
	if err := syscall.Mkfifo(filepath.Join(b.data, "db/pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(b.data, "sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	res := b.backup(nil)
	want := []string{filepath.Join(b.data, "db/pipe") + " (fifo)", filepath.Join(b.data, "sock") + " (socket)"}
	if !slices.Equal(res.Skipped, want) {
		t.Errorf("Result.Skipped = %q, want %q", res.Skipped, want)
	}
	vr, err := Verify(context.Background(), res.Path, passFunc(testPass))
	if err != nil {
		t.Fatal(err)
	}
	if got := vr.Manifest.Skipped; len(got) != 2 || got[0].Path != "db/pipe" || got[0].Type != TypeFifo || got[1].Path != "sock" || got[1].Type != TypeSocket {
		t.Errorf("Manifest.Skipped = %+v", got)
	}
	rr, err := Restore(context.Background(), b.restoreOptions(res.Path))
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(rr.Notes, "\n")
	for _, w := range []string{`"db/pipe" (fifo)`, `"sock" (socket)`} {
		if !strings.Contains(notes, w) {
			t.Errorf("Restore notes %q lack %s", rr.Notes, w)
		}
	}
}

// TestPlainArchiveFifo: a plain `tar -czf - -C DATA .` of a data directory
// holding a fifo (GNU tar archives fifos) restores without it, and the
// restore and verify list it.
func TestPlainArchiveFifo(t *testing.T) {
	b := newBox(t)
	src := t.TempDir()
	write(t, src, "f 0600 hello")
	if err := syscall.Mkfifo(filepath.Join(src, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	arch := filepath.Join(t.TempDir(), "plain.tar.gz")
	sh(t, `tar -czf "$A" -C "$S" .`, "A="+arch, "S="+src)
	vr, err := Verify(context.Background(), arch, nil)
	if err != nil || !slices.Contains(vr.Notes, `not restored: "pipe" (fifo)`) {
		t.Errorf("Verify() = %+v, %v; want the fifo in the notes", vr, err)
	}
	rr, err := Restore(context.Background(), b.restoreOptions(arch))
	if err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	if !slices.Contains(rr.Notes, `not restored: "pipe" (fifo)`) {
		t.Errorf("Restore notes = %q, want the fifo", rr.Notes)
	}
	if _, err := os.Lstat(filepath.Join(b.data, "pipe")); !os.IsNotExist(err) {
		t.Errorf("Lstat(pipe) after restore = %v, want not there", err)
	}
	if got, _ := os.ReadFile(filepath.Join(b.data, "f")); string(got) != "hello" {
		t.Errorf("f = %q, want hello", got)
	}
}
