package backup

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestListKinds: backups and pre-upgrade archives are listed together,
// newest first, each with its kind; archives of one second keep the later
// sequence number first; a name equal to the pre-upgrade one lists once.
func TestListKinds(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	files := []string{
		archiveName("executor", t0, Gzip, true, 0),
		archiveName("executor", t0.Add(2*time.Second), Gzip, true, 0),
		archiveName("executor", t0.Add(2*time.Second), Gzip, true, 1),
		archiveName("pre-upgrade", t0.Add(time.Second), Gzip, true, 0),
		archiveName("other", t0.Add(3*time.Second), Gzip, true, 0),
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ListKinds(dir, "executor", "pre-upgrade")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range got {
		rows = append(rows, l.Kind+" "+filepath.Base(l.Path))
	}
	want := []string{"backup " + files[2], "backup " + files[1], "pre-upgrade " + files[3], "backup " + files[0]}
	if diff := cmp.Diff(rows, want); diff != "" {
		t.Errorf("ListKinds() (-got +want):\n%s", diff)
	}
	if got, err := ListKinds(dir, "pre-upgrade", "pre-upgrade"); err != nil || len(got) != 1 || got[0].Kind != KindBackup {
		t.Errorf("ListKinds(pre-upgrade, pre-upgrade) = %+v, %v; want one backup", got, err)
	}
	if got, err := ListKinds(filepath.Join(dir, "none"), "executor", "pre-upgrade"); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListKinds(missing dir) = %#v, %v; want empty, not nil", got, err)
	}
}

// TestImageDigest: the index's digest (what executor.image pins), else
// the child manifest's.
func TestImageDigest(t *testing.T) {
	if d := (Info{IndexDigest: "sha256:i", ManifestDigest: "sha256:m"}).ImageDigest(); d != "sha256:i" {
		t.Errorf("ImageDigest() = %s, want the index's", d)
	}
	if d := (Info{ManifestDigest: "sha256:m"}).ImageDigest(); d != "sha256:m" {
		t.Errorf("ImageDigest() = %s, want the manifest's", d)
	}
}
