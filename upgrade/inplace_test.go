package upgrade

import (
	"context"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"
)

// TestInPlace: a rollback's restore keeps a release current holds,
// activates one previous holds (no network), and installs any other,
// also one whose manifest or platform differs from both.
func TestInPlace(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		image, plat string
		manifest    string
		want        string // the calls, space-separated
		changed     bool
	}{
		{"current", newRel.Image, newRel.Platform, string(newRel.Manifest), "", false},
		{"current, any manifest", newRel.Image, newRel.Platform, "", "", false},
		{"previous", oldRel.Image, oldRel.Platform, string(oldRel.Manifest), "activate " + m1, true},
		{"previous, other manifest", oldRel.Image, oldRel.Platform, string(newRel.Manifest), "install " + m2, true},
		{"previous, other platform", oldRel.Image, "linux/arm64", "", "install ", true},
		{"not a pinned reference", "r/e:v1", oldRel.Platform, string(oldRel.Manifest), "install " + m1, true},
	} {
		f := &fake{cur: newRel, prev: oldRel}
		changed, err := inPlace{rt: f, r: oldRel}.Install(ctx, tc.image, tc.plat, digestOf(tc.manifest))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := strings.TrimSpace(strings.Join(f.calls, " ")); got != strings.TrimSpace(tc.want) || changed != tc.changed {
			t.Errorf("%s: calls %q changed %v, want %q changed %v", tc.name, got, changed, strings.TrimSpace(tc.want), tc.changed)
		}
	}
}

// digestOf is s as a digest ("" stays "").
func digestOf(s string) digest.Digest { return digest.Digest(s) }
