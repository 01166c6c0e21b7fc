package testenv

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
)

// MessageCounter is a slog.Handler for tests that adds one to N for each
// record whose message contains Sub, at any level (a test counts how
// often a line was said: "waits for the install", "waiting for the
// lock"), and passes on to Handler the records Handler is enabled for.
// Its attrs and groups go to Handler; the count is shared.
type MessageCounter struct {
	slog.Handler
	Sub string
	N   *atomic.Int32
}

// Enabled is true: every record is looked at.
func (h MessageCounter) Enabled(context.Context, slog.Level) bool { return true }

// Handle counts r when its message contains Sub, then passes it on when
// Handler is enabled for its level.
func (h MessageCounter) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.Sub) {
		h.N.Add(1)
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the count shared.
func (h MessageCounter) WithAttrs(a []slog.Attr) slog.Handler {
	return MessageCounter{h.Handler.WithAttrs(a), h.Sub, h.N}
}

// WithGroup keeps the count shared.
func (h MessageCounter) WithGroup(name string) slog.Handler {
	return MessageCounter{h.Handler.WithGroup(name), h.Sub, h.N}
}
