package rehearse

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
)

// TailLines is how many of the last lines of the rehearsed payload's
// output (stdout and stderr, interleaved as written) a refusal quotes;
// TailLineMax bounds each line in bytes.
const (
	TailLines   = 20
	TailLineMax = 200
)

// tail keeps the last TailLines lines written to it, each cut to
// TailLineMax bytes; safe for concurrent writers.
type tail struct {
	mu      sync.Mutex
	lines   []string
	partial []byte
}

// Write implements io.Writer; it never fails.
func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rest := p
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			t.partial = appendCut(t.partial, rest)
			return len(p), nil
		}
		t.push(string(appendCut(t.partial, rest[:i])))
		t.partial = t.partial[:0]
		rest = rest[i+1:]
	}
}

// appendCut appends b to line, keeping at most TailLineMax bytes.
func appendCut(line, b []byte) []byte {
	if room := TailLineMax - len(line); room > 0 {
		line = append(line, b[:min(len(b), room)]...)
	}
	return line
}

func (t *tail) push(l string) {
	if l = strings.TrimRight(l, "\r"); strings.TrimSpace(l) == "" {
		return
	}
	t.lines = append(t.lines, l)
	if len(t.lines) > TailLines {
		t.lines = t.lines[len(t.lines)-TailLines:]
	}
}

// String is the kept lines, the unfinished last one too, joined with
// newlines; "" when nothing was written.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := append([]string(nil), t.lines...)
	if s := strings.TrimSpace(string(t.partial)); s != "" {
		lines = append(lines, string(t.partial))
		if len(lines) > TailLines {
			lines = lines[1:]
		}
	}
	for i, l := range lines {
		lines[i] = printable(l)
	}
	return strings.Join(lines, "\n")
}

// printable is l with every control character but tab written as \xNN:
// the lines are the payload's, quoted in an error on the operator's
// terminal, where an escape sequence (a colour, a title, a clipboard
// write) must show as text, never act.
func printable(l string) string {
	ctl := func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f || r >= 0x80 && r < 0xa0 }
	if !strings.ContainsFunc(l, ctl) {
		return l
	}
	var b strings.Builder
	for _, r := range l {
		if ctl(r) {
			fmt.Fprintf(&b, "\\x%02x", r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}
