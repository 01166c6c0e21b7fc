package supervisorwatch

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// wait fails t unless ch closes within a generous deadline.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not closed after 30s", what)
	}
}

// TestFollowGone: a followed connection that breaks marks the watch gone,
// and Until's context ends with ErrGone as its cause.
func TestFollowGone(t *testing.T) {
	broken := make(chan struct{})
	w := Follow(func(ctx context.Context) {
		select {
		case <-broken:
		case <-ctx.Done():
		}
	})
	defer w.Close()
	ctx, cancel := Until(context.Background(), w)
	defer cancel()
	if w.IsGone() || ctx.Err() != nil {
		t.Fatalf("gone before the connection broke")
	}
	close(broken)
	wait(t, w.Gone(), "Gone")
	wait(t, ctx.Done(), "Until's context")
	if !errors.Is(context.Cause(ctx), ErrGone) {
		t.Errorf("cause = %v, want ErrGone", context.Cause(ctx))
	}
}

// TestCloseNotGone: closing the watch ends the connection without
// marking the supervisor gone.
func TestCloseNotGone(t *testing.T) {
	ended := make(chan struct{})
	w := Follow(func(ctx context.Context) {
		<-ctx.Done()
		close(ended)
	})
	w.Close()
	wait(t, ended, "the follow")
	time.Sleep(10 * time.Millisecond) // the goroutine's check after follow returns
	if w.IsGone() {
		t.Errorf("gone after Close")
	}
}

// TestNeverGone: a nil watch, a watch that follows nothing and a value
// that is no Watcher are never gone, and Until's context ends only with
// its own cancel.
func TestNeverGone(t *testing.T) {
	var nilWatch *Watch
	for name, v := range map[string]any{"nil watch": nilWatch, "Follow(nil)": Follow(nil), "no watcher": struct{}{}, "nil": nil} {
		if IsGone(v) {
			t.Errorf("%s: gone", name)
		}
		ctx, cancel := Until(context.Background(), v)
		if ctx.Err() != nil {
			t.Errorf("%s: Until's context ended", name)
		}
		cancel()
		if context.Cause(ctx) == ErrGone {
			t.Errorf("%s: cause ErrGone", name)
		}
	}
	nilWatch.Close()
	nilWatch.WatchHold(make(chan struct{}), new(atomic.Bool))
}

// TestWatchHold: a hold whose connection ends unreleased marks the watch
// gone; a released one does not.
func TestWatchHold(t *testing.T) {
	w := Follow(nil)
	released := new(atomic.Bool)
	released.Store(true)
	done := make(chan struct{})
	w.WatchHold(done, released)
	close(done)
	time.Sleep(10 * time.Millisecond)
	if w.IsGone() {
		t.Fatalf("gone after a released hold ended")
	}
	done2 := make(chan struct{})
	w.WatchHold(done2, new(atomic.Bool))
	close(done2)
	wait(t, w.Gone(), "Gone after an unreleased hold ended")
}
