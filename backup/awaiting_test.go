package backup

import (
	"strings"
	"testing"
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
