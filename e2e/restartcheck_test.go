package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/supervisor"
)

// executorStatus is the running supervisor's status of the executor.
func executorStatus(t *testing.T, s *supervised) supervisor.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sts, err := s.client().Status(ctx)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return statusOf(sts, "executor")
}

// TestRestartRefusedForUninstalledPinE2E is the new operator's trial: with
// hbx supervise running a healthy Executor, executor.image is edited to a
// release not installed and hbx restart executor is run. The restart is
// refused before anything is stopped ("restart executor: run `hbx
// install` first ...; nothing stopped", exit 1): the Executor keeps its
// pid, RUNNING and healthy. After a stop, hbx start executor is refused
// the same way ("nothing started"): it stays STOPPED until hbx install,
// then starts.
func TestRestartRefusedForUninstalledPinE2E(t *testing.T) {
	requireE2E(t)
	b, s, _, v2, _ := upgradeBox(t)
	before := executorStatus(t, s)
	if err := config.WritePin(b.config, v2, platform(t), ""); err != nil {
		t.Fatal(err)
	}
	r := b.hbx("restart", "executor")
	msg := lastLine(r.stderr)
	if r.code != 1 {
		t.Errorf("hbx restart executor = %d, want 1\n%s", r.code, r.stderr)
	}
	for _, w := range []string{"restart executor: ", "hbx install` first", "nothing stopped"} {
		if !strings.Contains(msg, w) {
			t.Errorf("hbx restart executor said %q, want it to say %q", msg, w)
		}
	}
	after := executorStatus(t, s)
	if after.State != supervisor.Running || after.PID != before.PID {
		t.Errorf("executor %s pid %d after the refused restart, %s pid %d before: want it RUNNING with the same pid", after.State, after.PID, before.State, before.PID)
	}
	healthyAt(t, b.port, 30*time.Second)

	// A stop takes it down; the start after it is refused by the same
	// check ("start executor: run `hbx install` first ...; nothing
	// started", exit 1): it stays STOPPED, not spawned into FATAL.
	if r := b.hbx("stop", "executor"); r.code != 0 {
		t.Fatalf("hbx stop executor = %d\n%s", r.code, r.stderr)
	}
	r = b.hbx("start", "executor")
	if msg := lastLine(r.stderr); r.code != 1 || !strings.Contains(msg, "start executor: ") || !strings.Contains(msg, "hbx install` first") || !strings.Contains(msg, "nothing started") {
		t.Fatalf("hbx start executor with the pin not installed = %d, %q; want 1 and \"start executor: run `hbx install` first ...; nothing started\"", r.code, msg)
	}
	if st := executorStatus(t, s); st.State != supervisor.Stopped {
		t.Fatalf("executor %s (%s) after the refused start, want STOPPED", st.State, st.Detail)
	}
	if r := b.hbx("install"); r.code != 0 {
		t.Errorf("hbx install = %d\n%s", r.code, r.stderr)
	}
	if r := b.hbx("start", "executor"); r.code != 0 {
		t.Errorf("hbx start executor after the install = %d\n%s", r.code, r.stderr)
	}
}
