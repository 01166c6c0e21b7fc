package testenv_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv"
)

// TestMessageCounter: every record whose message contains Sub is
// counted, at any level and through derived loggers; Handler gets only
// the records it is enabled for.
func TestMessageCounter(t *testing.T) {
	var out bytes.Buffer
	var n atomic.Int32
	inner := slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})
	log := slog.New(testenv.MessageCounter{Handler: inner, Sub: "waits", N: &n})
	log.Debug("start waits for the install")
	log.Info("restart waits for the install")
	log.With("program", "app").WithGroup("g").Warn("stop waits too")
	log.Info("something else")
	if got := n.Load(); got != 3 {
		t.Errorf("counted %d records, want 3", got)
	}
	if s := out.String(); strings.Contains(s, `msg="start waits`) || !strings.Contains(s, "restart waits") || !strings.Contains(s, "program=app") || !strings.Contains(s, "something else") {
		t.Errorf("Handler got:\n%s\nwant the Info and Warn records only, the attrs kept", s)
	}
}
