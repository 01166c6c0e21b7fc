package supervisor

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Exit-code classes (systemd's RestartForceExitStatus and
// RestartPreventExitStatus): besides ExitCodes (expected), a program's
// RestartExitCodes ask for a restart now and its FatalExitCodes say
// that starting it again cannot help. An exit that follows the
// supervisor's own stop (a stop, a failed health wait, a wedge) is
// never classed: it is expected whatever its code.

// The afterExit values of classed exits.
const (
	afterFatal      afterExit = iota + 100 // exited with a fatal exit code: FATAL
	afterRestartNow                        // exited with a restart exit code: start now
)

// classExit handles an exit of the leader the supervisor did not ask
// for when its code is in one of p's classes, and reports whether it did:
// a fatal code ends in FATAL once the group is gone (afterFatal), a
// restart code starts the program again at once, without a backoff and
// without counting a failed start (afterRestartNow).
func (p *proc) classExit(ws syscall.WaitStatus, desc string) bool {
	if !ws.Exited() {
		return false
	}
	code := ws.ExitStatus()
	switch {
	case slices.Contains(p.spec.FatalExitCodes, code):
		p.after = afterFatal
		p.detail = fmt.Sprintf("%s, a fatal exit code: not restarted", desc)
		p.s.log.Error("exited with a fatal exit code", "program", p.spec.Name, "pid", p.pgid, "status", desc)
	case slices.Contains(p.spec.RestartExitCodes, code):
		p.after = afterRestartNow
		p.detail = fmt.Sprintf("%s, asking for a restart", desc)
		p.s.log.Info("exited asking for a restart", "program", p.spec.Name, "pid", p.pgid, "status", desc)
	default:
		return false
	}
	return true
}

// finishClassed moves on from an exit classExit handled, once the group
// is gone; it reports whether after was such an exit.
func (p *proc) finishClassed(after afterExit) bool {
	switch after {
	case afterFatal:
		reason := p.detail
		p.errLine.settle(stderrSettle)
		if line := p.errLine.String(); line != "" {
			reason += "; last stderr line: " + line
		}
		p.backoffN = 0
		p.toFatal(reason)
	case afterRestartNow:
		p.s.log.Info("restarting at once", "program", p.spec.Name)
		p.beginStart()
	default:
		return false
	}
	return true
}

// lastLine keeps the last non-blank line written to it (a program's
// stderr), at most lastLineMax bytes of it. It is safe for concurrent use.
type lastLine struct {
	mu      sync.Mutex
	pending []byte // the line being written, not yet ended
	last    string // the last ended non-blank line
	written int64  // bytes written to it so far

	// src, when set, is the pipe its bytes are copied from, and read
	// counts the bytes read from it (countingReader): settle waits until
	// the pipe is empty and every byte read was written here.
	src  *os.File
	read *countingReader
}

// stderrSettle bounds how long a fatal exit's reason waits for the
// program's last stderr bytes to pass from the pipe to errLine: the
// program wrote them before it exited, but the copying goroutine may not
// have run since.
const stderrSettle = 500 * time.Millisecond

// settle waits, at most max, until the source pipe holds no unread bytes
// and every byte read from it was written to l. Without a source it
// returns at once.
func (l *lastLine) settle(max time.Duration) {
	if l.src == nil || l.read == nil {
		return
	}
	rc, err := l.src.SyscallConn()
	if err != nil {
		return
	}
	for deadline := time.Now().Add(max); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		unread := -1
		_ = rc.Control(func(fd uintptr) { unread, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) })
		l.mu.Lock()
		done := unread == 0 && l.written == l.read.n.Load()
		l.mu.Unlock()
		if done || unread < 0 {
			return
		}
	}
}

// lastLineMax bounds the line kept: a reason shown by hbx status.
const lastLineMax = 400

// Write records b's lines; it never fails.
func (l *lastLine) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(b)
	l.written += int64(n)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			l.pending = appendBounded(l.pending, b)
			break
		}
		l.pending = appendBounded(l.pending, b[:i])
		if line := bytes.TrimSpace(l.pending); len(line) > 0 {
			l.last = string(line)
		}
		l.pending = l.pending[:0]
		b = b[i+1:]
	}
	return n, nil
}

// String returns the last line: the unended one when it is not blank,
// else the last ended one; "" when none was written.
func (l *lastLine) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if line := bytes.TrimSpace(l.pending); len(line) > 0 {
		return string(line)
	}
	return l.last
}

// appendBounded appends b to dst, keeping at most lastLineMax bytes.
func appendBounded(dst, b []byte) []byte {
	if room := lastLineMax - len(dst); room < len(b) {
		b = b[:max(room, 0)]
	}
	return append(dst, b...)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}
