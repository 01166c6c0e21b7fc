package backup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/regfile"
)

// TestCheckArchivePath: an archive path that is missing or not a regular
// file is refused without blocking, its error not repeating the path
// (the caller names it) and still matching fs.ErrNotExist or
// regfile.ErrNotRegular; a regular file passes.
func TestCheckArchivePath(t *testing.T) {
	dir := t.TempDir()
	reg, fifo := filepath.Join(dir, "a.tar.gz.gpg"), filepath.Join(dir, "fifo")
	if err := os.WriteFile(reg, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		want string
		is   error
	}{
		{reg, "", nil},
		{filepath.Join(dir, "missing"), "open archive: no such file or directory", fs.ErrNotExist},
		{dir, "archive is a directory: not a regular file", regfile.ErrNotRegular},
		{fifo, "archive is a FIFO: not a regular file", regfile.ErrNotRegular},
	} {
		err := CheckArchivePath(tt.path)
		if tt.is == nil {
			if err != nil {
				t.Errorf("CheckArchivePath(%s) = %v, want nil", tt.path, err)
			}
			continue
		}
		if err == nil || err.Error() != tt.want || !errors.Is(err, tt.is) {
			t.Errorf("CheckArchivePath(%s) = %v, want %q matching %v", tt.path, err, tt.want, tt.is)
		}
	}
	// An error naming another path keeps its text.
	other := errors.New("x")
	if err := archiveOpenError("/a", other); err == nil || err.Error() != "open archive: x" || !errors.Is(err, other) {
		t.Errorf("archiveOpenError(another error) = %v, want \"open archive: x\" wrapping it", err)
	}
}
