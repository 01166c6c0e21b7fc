package progress

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/installer"
)

// TestTermProgressKeepsLogLinesApart: a log line written while a layer's
// progress line is on screen clears that line, stands on its own line,
// and the progress line is drawn again below it; once the layer is done,
// log lines are written as they are.
func TestTermProgressKeepsLogLinesApart(t *testing.T) {
	var out bytes.Buffer
	p := NewTerm(&out)
	log := p.LogWriter()
	layer := installer.Event{Digest: "sha256:0123456789abcdef", Size: 2e6, Index: 0, Count: 1}

	p.Event(withKind(layer, installer.EventLayerStart))
	out.Reset()
	if _, err := log.Write([]byte("level=INFO msg=\"blob ready\"\n")); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	line := p.line
	if line == "" || !strings.HasPrefix(got, "\r\033[Klevel=INFO") || !strings.HasSuffix(got, "\n"+line) {
		t.Errorf("log write during a layer = %q; want the line cleared, the log line, then %q again", got, line)
	}

	done := layer
	done.Done = layer.Size
	p.Event(withKind(done, installer.EventLayerDone))
	out.Reset()
	log.Write([]byte("level=INFO msg=activated\n"))
	if got, want := out.String(), "level=INFO msg=activated\n"; got != want {
		t.Errorf("log write after the layer = %q, want %q", got, want)
	}
}

func withKind(e installer.Event, k installer.EventKind) installer.Event {
	e.Kind = k
	return e
}

// TestTermProgressFitsTheTerminal: a progress line never wraps (a wrapped
// line cannot be redrawn in place), and finish ends an unfinished one, so
// an error printed next starts its own line.
func TestTermProgressFitsTheTerminal(t *testing.T) {
	var out bytes.Buffer
	p := NewTerm(&out)
	p.cols = func() int { return 30 }
	layer := installer.Event{Digest: "sha256:0123456789abcdef", Size: 2e6, Done: 1e6, Index: 0, Count: 1}
	p.Event(withKind(layer, installer.EventLayerProgress))
	for _, l := range strings.Split(out.String(), "\r\033[K") {
		if len(l) >= 30 {
			t.Errorf("progress line %q is %d columns wide on a 30-column terminal", l, len(l))
		}
	}
	out.Reset()
	p.Finish()
	if got := out.String(); got != "\n" {
		t.Errorf("finish() with a progress line on screen wrote %q, want a newline", got)
	}
	out.Reset()
	p.Finish()
	if got := out.String(); got != "" {
		t.Errorf("a second finish() wrote %q, want nothing", got)
	}
}
