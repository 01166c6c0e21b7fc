package backup

import (
	"os"
	"path/filepath"
	"testing"
)

// TestListKept: the pre-restore and rolled-back copies beside the data
// directory are listed newest first with their kind, files and bytes;
// other names are not.
func TestListKept(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, n := range []string{"data", "data.pre-restore-20261130T100000Z", "data.pre-restore-20261130T100000Z-1", "data.rolled-back-20261201T090000Z", "data.restore-20261201T100000Z", "data.rolled-back-junk", "other.rolled-back-20261201T090000Z"} {
		if err := os.MkdirAll(filepath.Join(dir, n), 0o700); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, n, "f"), []byte("12345"), 0o600)
	}
	got, err := ListKept(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, kind string }{
		{"data.rolled-back-20261201T090000Z", KindRolledBack},
		{"data.pre-restore-20261130T100000Z-1", KindPreRestore},
		{"data.pre-restore-20261130T100000Z", KindPreRestore},
	}
	if len(got) != len(want) {
		t.Fatalf("ListKept() = %+v, want %v", got, want)
	}
	for i, w := range want {
		if g := got[i]; g.Path != filepath.Join(dir, w.name) || g.Kind != w.kind || g.Files != 1 || g.Bytes != 5 || g.Created.IsZero() {
			t.Errorf("ListKept()[%d] = %+v, want %s (%s), 1 file, 5 bytes", i, g, w.name, w.kind)
		}
	}
}
