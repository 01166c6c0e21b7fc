package supervisor

import (
	"context"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
)

// TestEarlySignals: before Run, SIGHUP is logged and ignored (the process
// lives on, the context stays), SIGTERM cancels the start; after Quiet
// nothing is logged or cancelled.
func TestEarlySignals(t *testing.T) {
	var logs testenv.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, e := HandleEarlySignals(context.Background(), log)
	waitLog := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(logs.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("log = %q, want %q", logs.String(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	syscall.Kill(syscall.Getpid(), syscall.SIGHUP)
	waitLog(`"signal: ignored while the supervisor starts" signal=SIGHUP`)
	if ctx.Err() != nil {
		t.Fatalf("context after SIGHUP = %v, want live", ctx.Err())
	}
	syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("context not cancelled by SIGTERM")
	}
	waitLog(`"signal: stopping before any program started" signal=SIGTERM`)

	ctx2, e2 := HandleEarlySignals(context.Background(), log)
	defer e2.Stop()
	e2.Quiet()
	e.Stop() // e2 still catches every signal
	before := logs.String()
	syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
	time.Sleep(100 * time.Millisecond) // nothing to wait for: a quiet handler does nothing
	if ctx2.Err() != nil || logs.String() != before {
		t.Errorf("after Quiet, SIGTERM: context %v, log %q; want nothing", ctx2.Err(), strings.TrimPrefix(logs.String(), before))
	}
}
