package main

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hermesbox/hbx/supervisor"
)

// supervisorWatch notices at once that the supervisor an operation talks
// to went away (killed, crashed, or shut down): it keeps one connection
// to the control socket open for the whole operation (a followed,
// discarded log stream, which the supervisor ends only when it exits or
// this process closes it) and closes gone when that connection, or an
// unreleased hold's, breaks. The programs a dead supervisor ran died with
// it (PR_SET_PDEATHSIG), so a backup, restore or upgrade stops waiting
// for them then.
type supervisorWatch struct {
	gone   chan struct{}
	once   sync.Once
	cancel context.CancelFunc
}

// watchSupervisor opens the watch on c, following program's log. When
// program is "" the watch never reports the supervisor gone.
func watchSupervisor(c *supervisor.Client, program string) *supervisorWatch {
	w := &supervisorWatch{gone: make(chan struct{})}
	if program == "" {
		w.cancel = func() {}
		return w
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() {
		_ = c.Logs(ctx, supervisor.LogsRequest{Name: program, Follow: true}, io.Discard)
		if ctx.Err() == nil {
			w.markGone()
		}
	}()
	return w
}

func (w *supervisorWatch) markGone() { w.once.Do(func() { close(w.gone) }) }

// Gone is closed once the supervisor is gone; a nil watch's never is.
func (w *supervisorWatch) Gone() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.gone
}

// isGone reports whether Gone is closed.
func (w *supervisorWatch) isGone() bool {
	select {
	case <-w.Gone():
		return true
	default:
		return false
	}
}

// Close ends the watch's connection; Gone stays as it is.
func (w *supervisorWatch) Close() {
	if w != nil {
		w.cancel()
	}
}

// watchHold marks w gone when h ends before released is set: the
// supervisor dropped the hold's connection.
func (w *supervisorWatch) watchHold(h *supervisor.Hold, released *atomic.Bool) {
	if w == nil {
		return
	}
	go func() {
		<-h.Done()
		if !released.Load() {
			w.markGone()
		}
	}()
}
