package upgrade

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/procscan"
)

// roundBox is a WatchedBox whose answers a test sets, recording the
// recoveries asked of it in order.
type roundBox struct {
	pending    error
	holder     lock.Holder
	held       bool
	restoreErr error
	changeFail bool
	calls      []string
}

func (b *roundBox) Pending() error              { b.calls = append(b.calls, "pending"); return b.pending }
func (b *roundBox) Holder() (lock.Holder, bool) { return b.holder, b.held }
func (b *roundBox) RecoverRestore(context.Context) error {
	b.calls = append(b.calls, "restore")
	return b.restoreErr
}
func (b *roundBox) RecoverChange(context.Context) bool {
	b.calls = append(b.calls, "change")
	return b.changeFail
}

// watchOf is a ChangeWatch over b logging into log.
func watchOf(b *roundBox, log *bytes.Buffer) ChangeWatch {
	return ChangeWatch{Retry: time.Minute, Box: func() WatchedBox { return b }, Logger: slog.New(slog.NewTextHandler(log, nil))}
}

// TestChangeWatchRound: the decisions of one round of the change watch:
// nothing unfinished or a live holder leaves things alone; otherwise the
// restore is resolved before the release change; a failure of either
// postpones the next round's recovery by Retry.
func TestChangeWatchRound(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	var log bytes.Buffer
	cases := []struct {
		name string
		box  roundBox
		want string
	}{
		{"nothing unfinished", roundBox{}, "pending"},
		{"held by a live process", roundBox{pending: errors.New("p"), holder: lock.Holder{PID: 1}, held: true}, "pending"},
		{"interrupted", roundBox{pending: errors.New("p")}, "pending restore change"},
		{"restore fails", roundBox{pending: errors.New("p"), restoreErr: errors.New("r")}, "pending restore"},
	}
	for _, c := range cases {
		w, st := watchOf(&c.box, &log), watchState{}
		w.round(ctx, &st, now)
		if got := strings.Join(c.box.calls, " "); got != c.want {
			t.Errorf("%s: calls %q, want %q", c.name, got, c.want)
		}
	}
	for _, b := range []*roundBox{{pending: errors.New("p"), restoreErr: errors.New("r")}, {pending: errors.New("p"), changeFail: true}} {
		w, st := watchOf(b, &log), watchState{}
		w.round(ctx, &st, now)
		n := len(b.calls)
		w.round(ctx, &st, now.Add(30*time.Second))
		if len(b.calls) != n {
			t.Errorf("after a failed recovery (restore error %v): a round within Retry called %v", b.restoreErr, b.calls[n:])
		}
		w.round(ctx, &st, time.Now().Add(2*time.Minute))
		if len(b.calls) != 2*n {
			t.Errorf("after a failed recovery (restore error %v): the round after Retry called %v, want %d calls again", b.restoreErr, b.calls[n:], n)
		}
	}
}

// TestChangeWatchStoppedHolder: a holder stopped with SIGSTOP is named in
// the log once, not every round, and nothing is recovered under it.
func TestChangeWatchStoppedHolder(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := procscan.ReadStat(cmd.Process.Pid)
		if err == nil && (st.State == 'T' || st.State == 't') {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not stopped after 30s (%v)", cmd.Process.Pid, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var log bytes.Buffer
	b := &roundBox{pending: errors.New("p"), holder: lock.Holder{PID: cmd.Process.Pid, Command: "hbx upgrade"}, held: true}
	w, st := watchOf(b, &log), watchState{}
	for range 3 {
		w.round(context.Background(), &st, time.Now())
	}
	if n := strings.Count(log.String(), "held by a stopped process"); n != 1 {
		t.Errorf("the stopped holder is named %d times in three rounds, want once:\n%s", n, log.String())
	}
	if got := strings.Join(b.calls, " "); got != "pending pending pending" {
		t.Errorf("calls %q, want only the pending checks", got)
	}
}
