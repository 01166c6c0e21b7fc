package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
)

// TestControlWaitingForInstallAnswersShutdown: a start or restart waiting
// for the install on start when the supervisor is told to shut down is
// answered "supervisor is shutting down" (ErrShuttingDown), not refused
// by a Check judging the release the cut-short install did not finish
// ("run `hbx install` first"), and starts nothing. Before, the waiter
// woke when the loops began, ran the Check before shutdown marked the
// supervisor as shutting down, and was refused.
func TestControlWaitingForInstallAnswersShutdown(t *testing.T) {
	for _, verb := range []string{"start", "restart"} {
		t.Run(verb, func(t *testing.T) {
			var installed atomic.Bool
			app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
			app.Check = func(context.Context) error {
				if !installed.Load() {
					return errors.New("run `hbx install` first: release not installed")
				}
				return nil
			}
			installing := make(chan struct{})
			install := func(ctx context.Context, _ func(string)) error {
				close(installing)
				<-ctx.Done() // cut short by the shutdown
				return ctx.Err()
			}
			var waits atomic.Int32
			logger := slog.New(testenv.MessageCounter{Handler: testLogger(t).Handler(), Sub: "waits for the install on start", N: &waits})
			s := startSupervisor(t, Options{Programs: []Program{app}, Logger: logger, Install: install, InstallProgram: "app"})
			select {
			case <-installing:
			case <-time.After(time.Minute):
				t.Fatal("the install on start did not begin within a minute")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			call := s.Start
			if verb == "restart" {
				call = s.Restart
			}
			type answer struct {
				res []Result
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := call(ctx, "app")
				done <- answer{res, err}
			}()
			for bound := time.Now().Add(30 * time.Second); waits.Load() == 0 && time.Now().Before(bound); {
				time.Sleep(5 * time.Millisecond)
			}
			if waits.Load() == 0 {
				t.Fatalf("%s during the install did not say it waits", verb)
			}
			s.Shutdown()
			var a answer
			select {
			case a = <-done:
			case <-time.After(time.Minute):
				t.Fatalf("%s waiting for the install not answered a minute after the shutdown", verb)
			}
			if errors.Is(a.err, ErrRefused) {
				t.Fatalf("%s during the install, then shutdown = %v, want ErrShuttingDown, not a refusal", verb, a.err)
			}
			shutting := errors.Is(a.err, ErrShuttingDown)
			for _, r := range a.res {
				shutting = shutting || strings.Contains(r.Error, ErrShuttingDown.Error())
			}
			if !shutting {
				t.Errorf("%s during the install, then shutdown = %+v, %v; want it to say %q", verb, a.res, a.err, ErrShuttingDown)
			}
			<-s.stopped
			if st := s.Get("app"); st.PID != 0 {
				t.Errorf("app = %s pid %d after the shutdown, want no process", st.State, st.PID)
			}
		})
	}
}
