package installer

import (
	"fmt"
	"sync/atomic"

	digest "github.com/opencontainers/go-digest"
)

// EventKind names a step of an install, in the order they happen.
type EventKind string

// The events an install reports.
const (
	EventBlobStart     EventKind = "blob-start"      // a layer blob is about to be fetched (or found cached)
	EventBlobDone      EventKind = "blob-done"       // the blob is complete and verified in the cache (a reused one: once its layer read it)
	EventLayerStart    EventKind = "layer-start"     // a layer is about to be applied
	EventLayerProgress EventKind = "layer-progress"  // Done of Size compressed bytes of the layer applied so far
	EventLayerDone     EventKind = "layer-done"      // the layer is applied and its diff_id checked
	EventActivate      EventKind = "activate"        // the staged release is durable; publishing starts
	EventRenamed       EventKind = "release-renamed" // releases/<hex> is in place
	EventSwap          EventKind = "symlink-swap"    // current is about to be switched
)

// Event is one progress report. Size is in bytes; Index counts from 0 of Count.
type Event struct {
	Kind   EventKind     `json:"event"`
	Digest digest.Digest `json:"digest,omitempty"`
	Size   int64         `json:"size,omitempty"`
	Done   int64         `json:"done,omitempty"`
	Index  int           `json:"index"`
	Count  int           `json:"count,omitempty"`
}

// Progress receives events. Implementations must be quick and safe for
// concurrent use: blob events come from the fetching goroutine while layer
// events come from the extracting one.
type Progress interface {
	Event(Event)
}

type nopProgress struct{}

func (nopProgress) Event(Event) {}

// ProgressFunc adapts a function to Progress.
type ProgressFunc func(Event)

// Event calls f.
func (f ProgressFunc) Event(e Event) { f(e) }

// LayerStatus turns events into one line of status for set, what a
// supervised program's status shows while an install runs for it:
// "installing the release (N/M layers)", N the layers applied, then
// "installing the release: activating it".
func LayerStatus(set func(string)) Progress {
	var applied atomic.Int64
	return ProgressFunc(func(e Event) {
		switch e.Kind {
		case EventBlobStart, EventLayerStart:
			set(fmt.Sprintf("installing the release (%d/%d layers)", applied.Load(), e.Count))
		case EventLayerDone:
			set(fmt.Sprintf("installing the release (%d/%d layers)", applied.Add(1), e.Count))
		case EventActivate:
			set("installing the release: activating it")
		}
	})
}
