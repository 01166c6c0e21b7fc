package progress

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/hermesbox/hbx/installer"
)

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// JSON writes every installer event as one JSON line with its time, for
// host-side tooling; it is safe for concurrent use.
type JSON struct {
	mu  sync.Mutex
	enc *json.Encoder
}

// NewJSON writes JSON lines to w.
func NewJSON(w io.Writer) *JSON { return &JSON{enc: json.NewEncoder(w)} }

// Step writes a step of a recorded release change: {"event": s}.
func (p *JSON) Step(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.enc.Encode(map[string]any{"time": time.Now().UTC(), "event": s})
}

// Result writes the result line: fields plus time and "event": "result".
func (p *JSON) Result(fields map[string]any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	fields["time"], fields["event"] = time.Now().UTC(), "result"
	return p.enc.Encode(fields)
}

// Event writes e with the time (installer.Progress).
func (p *JSON) Event(e installer.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.enc.Encode(struct {
		Time time.Time `json:"time"`
		installer.Event
	}{time.Now().UTC(), e})
}

// Term draws one line per layer on a terminal, redrawn in place while the
// layer is applied: index, digest, MiB of total, rate; it is safe for
// concurrent use.
type Term struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
	line  string     // the unfinished progress line on screen, "" when none
	cols  func() int // the terminal's width, 0 when unknown
}

// LogWriter returns a writer for log lines that shares the terminal with
// the progress line: each write clears the line, writes the log line and
// draws the progress line again below it.
func (p *Term) LogWriter() io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.line != "" {
			fmt.Fprint(p.w, "\r\033[K")
		}
		n, err := p.w.Write(b)
		if p.line != "" {
			fmt.Fprint(p.w, p.line)
		}
		return n, err
	})
}

// writerFunc adapts a function to io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// NewTerm draws on w, cut to its width when w is a terminal.
func NewTerm(w io.Writer) *Term {
	return &Term{w: w, cols: func() int {
		if f, ok := w.(*os.File); ok {
			if c, _, err := term.GetSize(int(f.Fd())); err == nil {
				return c
			}
		}
		return 0
	}}
}

// Finish ends an unfinished progress line, so what is printed next (the
// error of an interrupted install) starts on a line of its own.
func (p *Term) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.line != "" {
		fmt.Fprint(p.w, "\n")
		p.line = ""
	}
}

// Event draws e (installer.Progress).
func (p *Term) Event(e installer.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Kind {
	case installer.EventLayerStart:
		p.start = time.Now()
		p.draw(e, 0, false)
	case installer.EventLayerProgress:
		p.draw(e, e.Done, false)
	case installer.EventLayerDone:
		p.draw(e, e.Size, true)
	case installer.EventActivate:
		fmt.Fprintf(p.w, "activating %s\n", short(string(e.Digest)))
	}
}

// draw writes the layer's line with done of its bytes applied; final
// ends the line.
func (p *Term) draw(e installer.Event, done int64, final bool) {
	secs := time.Since(p.start).Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(done) / secs / mib
	}
	// MiB, as every other size hbx prints (units.Bytes).
	line := fmt.Sprintf("layer %d/%d %s %6.1f/%.1f MiB %6.1f MiB/s", e.Index+1, e.Count, short(string(e.Digest)), float64(done)/mib, float64(e.Size)/mib, rate)
	// A line that wraps cannot be redrawn in place (\r goes back to the
	// start of its last row only): cut it to the terminal's width.
	if c := p.cols(); c > 1 && len(line) >= c {
		line = line[:c-1]
	}
	fmt.Fprint(p.w, "\r\033[K"+line)
	p.line = line
	if final {
		fmt.Fprint(p.w, "\n")
		p.line = ""
	}
}

// mib is bytes per MiB.
const mib = 1 << 20

// short abbreviates a digest to algorithm:12 hex.
func short(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}
