package release

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMirror(t *testing.T) {
	tests := []struct {
		in      string
		want    Mirror
		wantErr string
	}{
		{"ghcr.io/rhyssullivan/executor-selfhost=ghcr.io/usefulsoftwareco/executor-selfhost", Mirror{"ghcr.io/rhyssullivan/executor-selfhost", "ghcr.io/usefulsoftwareco/executor-selfhost"}, ""},
		{"ghcr.io/rhyssullivan=127.0.0.1:5000/mirror", Mirror{"ghcr.io/rhyssullivan", "127.0.0.1:5000/mirror"}, ""},
		{"ghcr.io/a/b", Mirror{}, "is not PREFIX=LOCATION"},
		{"ghcr.io/a/b=", Mirror{}, "is not PREFIX=LOCATION"},
		{"executor-selfhost=ghcr.io/a/b", Mirror{}, "is not PREFIX=LOCATION"}, // not fully qualified
		{"ghcr.io=quay.io/a", Mirror{}, "is not PREFIX=LOCATION"},             // a bare registry
		{"ghcr.io/a/b:v1=ghcr.io/c/b", Mirror{}, "is not PREFIX=LOCATION"},    // a tag
		{"ghcr.io/A/b=ghcr.io/c/b", Mirror{}, "is not PREFIX=LOCATION"},       // not the grammar
		{"docker.io/oven/bun=docker.io/oven/bun", Mirror{}, "names the same location twice"},
	}
	for _, tt := range tests {
		got, err := ParseMirror(tt.in)
		if tt.wantErr != "" {
			if !errors.Is(err, ErrBadMirror) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.in) {
				t.Errorf("ParseMirror(%q) = %v, %v; want ErrBadMirror naming it and %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseMirror(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

// TestLocations: the locations of the longest matching prefix's mirrors,
// in their order, then the image's own name; a prefix matches at path
// boundaries only.
func TestLocations(t *testing.T) {
	mirrors := []Mirror{
		{"ghcr.io/rhyssullivan", "127.0.0.1:1/ns"},
		{"ghcr.io/rhyssullivan/executor-selfhost", "127.0.0.1:2/first"},
		{"ghcr.io/rhyssullivan/executor-selfhost", "ghcr.io/usefulsoftwareco/executor-selfhost"},
	}
	tests := []struct {
		name string
		want []string
	}{
		{"ghcr.io/rhyssullivan/executor-selfhost", []string{"127.0.0.1:2/first", "ghcr.io/usefulsoftwareco/executor-selfhost", "ghcr.io/rhyssullivan/executor-selfhost"}},
		{"ghcr.io/rhyssullivan/other", []string{"127.0.0.1:1/ns/other", "ghcr.io/rhyssullivan/other"}},
		{"ghcr.io/rhyssullivan/executor-selfhost-x", []string{"127.0.0.1:1/ns/executor-selfhost-x", "ghcr.io/rhyssullivan/executor-selfhost-x"}},
		{"ghcr.io/rhyssullivanx/a", []string{"ghcr.io/rhyssullivanx/a"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(Locations(tt.name, mirrors), tt.want); diff != "" {
			t.Errorf("Locations(%q) (-got +want):\n%s", tt.name, diff)
		}
	}
	if got := Locations("ghcr.io/a/b", nil); len(got) != 1 || got[0] != "ghcr.io/a/b" {
		t.Errorf("Locations(no mirrors) = %v, want the name alone", got)
	}
}
