package supervisorwatch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// ErrGone: the connection to the supervisor broke while an operation
// depended on it: it died (its programs died with it) or shut down.
// backup.ErrSupervisorGone and upgrade.ErrSupervisorGone are this error.
var ErrGone = errors.New("the supervisor is gone (its connection broke)")

// Watcher is implemented by the services of a backup, restore or release
// change that notice at once when the supervisor goes away: Gone is closed
// when a connection to it breaks without being released.
type Watcher interface {
	Gone() <-chan struct{}
}

// GoneOf is v's Gone channel when v is a Watcher, else nil (never ready).
func GoneOf(v any) <-chan struct{} {
	if w, ok := v.(Watcher); ok {
		return w.Gone()
	}
	return nil
}

// IsGone reports whether v is a Watcher whose supervisor is gone.
func IsGone(v any) bool {
	select {
	case <-GoneOf(v):
		return true
	default:
		return false
	}
}

// Until returns ctx cancelled with ErrGone as its cause once v's
// supervisor is gone (never when v is not a Watcher); cancel releases it
// and must be called.
func Until(ctx context.Context, v any) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithCancelCause(ctx)
	if gone := GoneOf(v); gone != nil {
		go func() {
			select {
			case <-gone:
				cancel(ErrGone)
			case <-cctx.Done():
			}
		}()
	}
	return cctx, func() { cancel(nil) }
}

// Watch is the supervisor side: it closes Gone once the followed
// connection or a watched hold breaks. A nil *Watch is never gone.
type Watch struct {
	gone   chan struct{}
	once   sync.Once
	cancel context.CancelFunc
}

// Follow starts a Watch over follow, which keeps one connection to the
// supervisor open until its context ends (Close) or the connection
// breaks; it returning before Close marks the supervisor gone. With a nil
// follow the watch never reports the supervisor gone.
func Follow(follow func(ctx context.Context)) *Watch {
	w := &Watch{gone: make(chan struct{}), cancel: func() {}}
	if follow == nil {
		return w
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() {
		follow(ctx)
		if ctx.Err() == nil {
			w.markGone()
		}
	}()
	return w
}

func (w *Watch) markGone() { w.once.Do(func() { close(w.gone) }) }

// Gone is closed once the supervisor is gone; a nil watch's never is.
func (w *Watch) Gone() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.gone
}

// IsGone reports whether Gone is closed.
func (w *Watch) IsGone() bool { return IsGone(w) }

// Close ends the followed connection; Gone stays as it is.
func (w *Watch) Close() {
	if w != nil {
		w.cancel()
	}
}

// WatchHold marks w gone when done (a hold's connection ending) closes
// before released is set: the supervisor dropped the hold.
func (w *Watch) WatchHold(done <-chan struct{}, released *atomic.Bool) {
	if w == nil {
		return
	}
	go func() {
		<-done
		if !released.Load() {
			w.markGone()
		}
	}()
}
