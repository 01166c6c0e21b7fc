package upgrade

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/journal"
	"github.com/hermesbox/hbx/release"
)

// TestJournalFormat: upgrade.json is written with "format" first; one
// written by an hbx before the key existed is still read; one of an
// unknown format is refused naming both formats.
func TestJournalFormat(t *testing.T) {
	dir := t.TempDir()
	j := &Journal{Old: Release{Target: release.Target{Image: "a"}}, New: Release{Target: release.Target{Image: "b"}}}
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

// TestReleaseJSONKeepsItsFields: a release in upgrade.json, written
// before Release carried release.Target, reads back field for field, and
// is written again under the same names.
func TestReleaseJSONKeepsItsFields(t *testing.T) {
	const old = `{"image":"r/e:v1@sha256:aa","platform":"linux/amd64","index_digest":"sha256:aa","manifest_digest":"sha256:11","mcp_tools":{"names":["x"]}}`
	var r Release
	if err := json.Unmarshal([]byte(old), &r); err != nil {
		t.Fatalf("json.Unmarshal(%s) = %v", old, err)
	}
	want := release.Target{Image: "r/e:v1@sha256:aa", Platform: "linux/amd64", IndexDigest: "sha256:aa", ManifestDigest: "sha256:11"}
	if r.Target != want || r.MCPTools == nil || len(r.MCPTools.Names) != 1 {
		t.Errorf("json.Unmarshal(%s) = %+v, want %+v with tools [x]", old, r, want)
	}
	var back map[string]any
	b, _ := json.Marshal(r)
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"image", "platform", "index_digest", "manifest_digest", "mcp_tools"} {
		if _, ok := back[k]; !ok {
			t.Errorf("json.Marshal(Release) = %s, missing %q", b, k)
		}
	}
}
