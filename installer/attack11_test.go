package installer

import (
	"context"
	"testing"
	"time"
)

// TestDeadlineScaleSaturates: install.min_rate 1 (byte/s) with a 10 GB
// image, or a very long install.timeout, makes base + size/rate larger
// than a time.Duration holds; the sum overflowed to a negative limit and
// the install failed at once with "no release after -2562047h...".
func TestDeadlineScaleSaturates(t *testing.T) {
	for _, tc := range []struct {
		base time.Duration
		rate int64
		size int64
	}{
		{10 * time.Minute, 1, 10 << 30},
		{2500000 * time.Hour, 1, 1 << 30},
	} {
		ctx, d, stop := withDeadline(context.Background(), tc.base, tc.rate)
		d.scale(tc.size)
		if d.limit < tc.base {
			t.Errorf("base %s, %d B at %d B/s: limit %s, want at least the base", tc.base, tc.size, tc.rate, d.limit)
		}
		select {
		case <-ctx.Done():
			t.Errorf("base %s, %d B at %d B/s: the deadline fired at once (%v)", tc.base, tc.size, tc.rate, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
		stop()
	}
}
