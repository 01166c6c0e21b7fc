package backup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
)

// TestNextSteps: the steps name the registry way, hbx export and the
// skopeo command that copies the very image (name@digest, its tag) with
// its index, on one line, and the way out without the image (restore
// another archive: issue 25 item 3); a reference that does not parse gets the
// command's placeholders.
func TestNextSteps(t *testing.T) {
	const d = "sha256:e40b2179c005b3124e794e9a8505341db46d0a9a1631e7f3fdcd023462ecf70b"
	got := NextSteps("ghcr.io/rhyssullivan/executor-selfhost:v1.5.12@" + d)
	for _, want := range []string{
		"`hbx install` once the registry answers",
		"offline `hbx install --from FILE` with FILE written by `hbx export FILE` on a box where it is active",
		"`skopeo copy --all --preserve-digests docker://ghcr.io/rhyssullivan/executor-selfhost@" + d + " oci-archive:FILE:v1.5.12`",
		"then start `hbx supervise`",
		"executor.image must name it",
		"or, if it cannot be had, restore another archive over this data: `hbx restore ARCHIVE`",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("NextSteps(...) = %q, want it to contain %q", got, want)
		}
	}
	if strings.Contains(got, "\n") {
		t.Errorf("NextSteps(...) = %q, want one line", got)
	}
	if got := NextSteps("not a reference"); !strings.Contains(got, "docker://NAME@DIGEST oci-archive:FILE:TAG") {
		t.Errorf("NextSteps(bad reference) = %q, want the command's placeholders", got)
	}
}

// TestNeededReleases: a "restored, not started" journal names the
// release its data awaits and the one active before the restore, and so
// does the restore it began over (Prior); no journal names none; a
// journal of another format is an error (pruning then keeps everything).
func TestNeededReleases(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if got, err := NeededReleases(data); err != nil || len(got) != 0 {
		t.Fatalf("NeededReleases(no journal) = %v, %v; want none", got, err)
	}
	d := func(s string) digest.Digest { return digest.FromString(s) }
	awaited := release.Target{Image: "r/x:2@" + d("i2").String(), IndexDigest: d("i2"), Platform: "linux/amd64", ManifestDigest: d("m2")}
	j := &journal{Phase: phaseNotStarted, Archive: "a.tar.gz.gpg", Awaiting: &journalAwait{Target: awaited},
		Runtime: &journalRuntime{PriorImage: "r/x:1@" + d("i1").String(), PriorPlatform: "linux/amd64", PriorManifest: d("m1")},
		Prior:   &journal{Phase: phaseNotStarted, Awaiting: &journalAwait{Target: release.Target{IndexDigest: d("i0")}, Configured: true}}}
	if err := j.write(data); err != nil {
		t.Fatal(err)
	}
	got, err := NeededReleases(data)
	if err != nil {
		t.Fatalf("NeededReleases() = %v", err)
	}
	want := []release.Target{awaited, {Image: "r/x:1@" + d("i1").String(), Platform: "linux/amd64", ManifestDigest: d("m1")}, {IndexDigest: d("i0")}}
	if !slices.Equal(got, want) {
		t.Errorf("NeededReleases() = %+v, want %+v", got, want)
	}
	if err := os.WriteFile(journalPath(data), []byte(`{"format": 99}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NeededReleases(data); err == nil {
		t.Error("NeededReleases(journal of format 99) = nil error, want one")
	}
}
