package supervisor

import (
	"io"
	"os"
	"testing"
	"time"
)

// TestLastLineSettles: a fatal exit's reason waits for the stderr bytes
// the program wrote before it exited, even when the goroutine that
// copies them has not run yet (seen under load: the reason lacked the
// last stderr line).
func TestLastLineSettles(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	var l lastLine
	l.src, l.read = pr, &countingReader{r: pr}
	if _, err := pw.WriteString("starting\nconfig: fatal: no platform paired\n"); err != nil {
		t.Fatal(err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		time.Sleep(100 * time.Millisecond) // the copier is late
		buf := make([]byte, 4096)
		n, _ := l.read.Read(buf)
		l.Write(buf[:n])
	}()
	l.settle(10 * time.Second)
	if got, want := l.String(), "config: fatal: no platform paired"; got != want {
		t.Errorf("lastLine after settle = %q, want %q", got, want)
	}
	<-copied
}

// TestLastLineSettleWithoutSource: without a source pipe settle returns
// at once.
func TestLastLineSettleWithoutSource(t *testing.T) {
	var l lastLine
	start := time.Now()
	l.settle(time.Minute)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("settle without a source took %s, want at once", d)
	}
	_, _ = io.WriteString(&l, "x")
}
