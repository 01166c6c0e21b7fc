package release

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinkNamesTheMissingLink: a missing or dangling previous link is
// "no previous release", not "no active release" (an upgrade logged the
// latter while a release was active), and both still match ErrNoRelease.
func TestLinkNamesTheMissingLink(t *testing.T) {
	const hex = "5d7f96fd176ba5be7c0f9602ba83c2405519dc5c7926838fb040b1a3b03d34fd"
	tests := []struct {
		name     string
		link     string
		dangling bool
		want     string
	}{
		{"current missing", CurrentLink, false, "no active release: "},
		{"previous missing", PreviousLink, false, "no previous release: "},
		{"current dangling", CurrentLink, true, "no active release: current points to missing releases/" + hex},
		{"previous dangling", PreviousLink, true, "no previous release: previous points to missing releases/" + hex},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rd := t.TempDir()
			if tc.dangling {
				if err := os.Symlink(ReleasesDir+"/"+hex, filepath.Join(rd, tc.link)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Link(rd, tc.link)
			if !errors.Is(err, ErrNoRelease) {
				t.Fatalf("Link(%s) = %v, want ErrNoRelease", tc.link, err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("Link(%s) = %q, want it to start with %q", tc.link, err, tc.want)
			}
		})
	}
}
