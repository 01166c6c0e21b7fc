package upgrade

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/journal"
)

// TestJournalFormat: upgrade.json is written with "format" first; one
// written by an hbx before the key existed is still read; one of an
// unknown format is refused naming both formats.
func TestJournalFormat(t *testing.T) {
	dir := t.TempDir()
	j := &Journal{Old: Release{Image: "a"}, New: Release{Image: "b"}}
	if err := j.write(dir, PhaseDone, time.Now()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(journalPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "{\n  \"format\": 1,\n  \"phase\": \"done\",") {
		t.Errorf("upgrade.json = %s, want format 1 first", b)
	}

	old := `{"phase": "done", "old": {"image": "a", "platform": "linux/amd64", "index_digest": "", "manifest_digest": ""},
	"new": {"image": "b", "platform": "linux/amd64", "index_digest": "", "manifest_digest": ""},
	"started": "2026-11-01T10:00:00Z", "updated": "2026-11-01T10:01:00Z"}`
	if err := os.WriteFile(journalPath(dir), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJournal(dir)
	if err != nil || got == nil || got.Phase != PhaseDone || got.New.Image != "b" {
		t.Errorf("ReadJournal(no format key) = %+v, %v; want the done journal", got, err)
	}

	if err := os.WriteFile(journalPath(dir), []byte(`{"format": 2, "phase": "done"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = ReadJournal(dir)
	want := "upgrade journal " + journalPath(dir) + " has format 2, this hbx reads 1; finish it with the hbx that wrote it"
	if got != nil || !errors.Is(err, journal.ErrFormat) || err.Error() != want {
		t.Errorf("ReadJournal(format 2) = %+v, %v; want %q", got, err, want)
	}
}
