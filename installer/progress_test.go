package installer

import (
	"slices"
	"testing"
)

// TestLayerStatus: the status line counts applied layers and says when
// the release is being activated.
func TestLayerStatus(t *testing.T) {
	var got []string
	p := LayerStatus(func(s string) { got = append(got, s) })
	for _, e := range []Event{
		{Kind: EventBlobStart, Count: 2}, {Kind: EventLayerStart, Count: 2}, {Kind: EventLayerProgress, Count: 2},
		{Kind: EventLayerDone, Count: 2}, {Kind: EventLayerStart, Index: 1, Count: 2}, {Kind: EventLayerDone, Index: 1, Count: 2},
		{Kind: EventActivate},
	} {
		p.Event(e)
	}
	want := []string{
		"installing the release (0/2 layers)", "installing the release (0/2 layers)", "installing the release (1/2 layers)",
		"installing the release (1/2 layers)", "installing the release (2/2 layers)", "installing the release: activating it",
	}
	if !slices.Equal(got, want) {
		t.Errorf("LayerStatus lines = %q, want %q", got, want)
	}
}
