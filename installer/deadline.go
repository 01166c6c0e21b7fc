package installer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"time"

	"github.com/hermesbox/hbx/internal/units"
	"github.com/hermesbox/hbx/release"
)

var (
	// ErrTimeout: the install did not finish within its deadline
	// (Options.Timeout plus the image's size at Options.MinRate).
	// Nothing was activated.
	ErrTimeout = errors.New("install deadline passed")
	// ErrInterrupted: the caller's context ended (Ctrl-C, SIGTERM) before
	// the release was activated. Nothing was activated.
	ErrInterrupted = errors.New("interrupted")
)

// errDeadline is the cancel cause of an install's own deadline.
var errDeadline = errors.New("install deadline")

// deadline bounds a cold install: base at first, base + size/rate once
// the manifest says how many bytes the image has. A zero base means none.
type deadline struct {
	base  time.Duration
	rate  int64 // bytes per second; 0: no size-scaled part
	start time.Time
	timer *time.Timer
	limit time.Duration
	size  int64 // bytes the limit was scaled by
}

// withDeadline returns ctx bounded by d (ctx itself when base is 0).
func withDeadline(ctx context.Context, base time.Duration, rate int64) (context.Context, *deadline, context.CancelFunc) {
	d := &deadline{base: base, rate: rate, start: time.Now(), limit: base}
	if base <= 0 {
		return ctx, d, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	d.timer = time.AfterFunc(base, func() { cancel(errDeadline) })
	return ctx, d, func() { d.timer.Stop(); cancel(nil) }
}

// scale extends the deadline to base + size/rate from the start.
func (d *deadline) scale(size int64) {
	if d.timer == nil || d.rate <= 0 || size <= 0 {
		return
	}
	d.size = size
	// Saturate: a tiny rate or a huge base must not wrap the sum around.
	extra := float64(size) / float64(d.rate) * float64(time.Second)
	if extra >= float64(math.MaxInt64-d.base) {
		d.limit = math.MaxInt64
	} else {
		d.limit = d.base + time.Duration(extra)
	}
	if d.timer.Stop() { // not fired yet
		d.timer.Reset(max(d.limit-time.Since(d.start), 0))
	}
}

// String is the limit and how it was reached: "10m0s", or "37m4s (10m0s
// + 812.0 MiB at 512.0 KiB/s)".
func (d *deadline) String() string {
	if d.size == 0 {
		return d.base.String()
	}
	return fmt.Sprintf("%s (%s + %s at %s/s)", d.limit.Round(time.Second), d.base, units.Bytes(d.size), units.Bytes(d.rate))
}

// stopError is an install stopped before activation: its text says what
// is kept; it unwraps to the class (ErrTimeout, ErrInterrupted) and the
// context's error.
type stopError struct {
	msg  string
	errs []error
}

func (e *stopError) Error() string   { return e.msg }
func (e *stopError) Unwrap() []error { return e.errs }

// stopped describes an install that ctx (or its deadline) stopped, for
// runtimeDir whose active release before the install was cur (nil: none).
func stopped(class error, head string, cur *release.Installed, runtimeDir string, causes ...error) error {
	active := "no release is active"
	if cur != nil {
		active = cur.Meta.Image + " stays active"
	}
	n, size := release.CompleteBlobs(filepath.Join(runtimeDir, release.BlobsDir))
	kept := "no complete blob is kept"
	if n > 0 {
		kept = fmt.Sprintf("%d complete blobs (%s) are kept in %s for the next run", n, units.Bytes(size), filepath.Join(runtimeDir, release.BlobsDir))
	}
	return &stopError{
		msg:  fmt.Sprintf("%s: nothing was activated (%s); %s", head, active, kept),
		errs: append([]error{class}, causes...),
	}
}

// stepTracker passes events on and remembers the step the install is at,
// for the error of an install stopped half-way.
type stepTracker struct {
	Progress
	mu   sync.Mutex
	step string
}

func (t *stepTracker) Event(e Event) {
	t.mu.Lock()
	switch e.Kind {
	case EventLayerStart:
		t.step = fmt.Sprintf("layer %d/%d %s", e.Index+1, e.Count, e.Digest)
	case EventLayerDone:
		if e.Index+1 == e.Count {
			t.step = "validation"
		}
	}
	t.mu.Unlock()
	t.Progress.Event(e)
}

// at says where the install is: " at layer 2/3 sha256:…", or "" before
// the first layer.
func (t *stepTracker) at() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.step == "" {
		return " before the first layer"
	}
	return " at " + t.step
}
