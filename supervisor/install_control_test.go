package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
)

// TestControlDuringInstallWaitsForIt: a start or restart asked for over
// the socket while the install on start runs waits for the install to
// finish, then is judged against the installed release (Program.Check
// never runs before it is there) and starts or restarts what it names;
// before, the restart (and a start of a program the install does not
// mark STARTING) ran the Check at once and was refused with "release not
// installed" although the supervisor was installing it.
func TestControlDuringInstallWaitsForIt(t *testing.T) {
	for _, tc := range []struct {
		name           string
		verb           string
		names          []string
		installProgram string // "" : the install names no program (all STOPPED while it runs)
	}{
		{name: "restart the install's program", verb: "restart", names: []string{"app"}, installProgram: "app"},
		{name: "restart all", verb: "restart", names: []string{"all"}, installProgram: "app"},
		{name: "start the install's program", verb: "start", names: []string{"app"}, installProgram: "app"},
		{name: "start all", verb: "start", names: []string{"all"}, installProgram: "app"},
		{name: "start with no install program", verb: "start", names: []string{"app"}},
		{name: "restart with no install program", verb: "restart", names: []string{"app"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var installed atomic.Bool
			var early atomic.Int32 // Check calls before the release was installed
			app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
			app.Check = func(context.Context) error {
				if !installed.Load() {
					early.Add(1)
					return errors.New("run `hbx install` first: release not installed")
				}
				return nil
			}
			other := helperProgram(t, progDir(t, "other"), "other", "sleep", "")
			installing, finish := make(chan struct{}), make(chan struct{})
			install := func(ctx context.Context, progress func(string)) error {
				close(installing)
				select {
				case <-finish:
				case <-ctx.Done():
					return ctx.Err()
				}
				installed.Store(true)
				return nil
			}
			sockDir, err := os.MkdirTemp("", "hbx")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(sockDir) })
			sock := filepath.Join(sockDir, "hbx.sock")
			var waits atomic.Int32
			logger := slog.New(testenv.MessageCounter{Handler: testLogger(t).Handler(), Sub: "waits for the install on start", N: &waits})
			s := startSupervisor(t, Options{Programs: []Program{app, other}, Socket: sock, Logger: logger, Install: install, InstallProgram: tc.installProgram})
			select {
			case <-installing:
			case <-time.After(time.Minute):
				t.Fatal("the install on start did not begin within a minute")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c, err := Dial(ctx, sock)
			if err != nil {
				t.Fatal(err)
			}
			call := c.Start
			if tc.verb == "restart" {
				call = c.Restart
			}
			type answer struct {
				res []Result
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := call(ctx, tc.names...)
				done <- answer{res, err}
			}()
			// The install ends once the call says it waits for it, was
			// answered (the fault this test proves), or after a bound (a
			// call that waits without saying so).
			for bound := time.Now().Add(10 * time.Second); waits.Load() == 0 && len(done) == 0 && time.Now().Before(bound); {
				time.Sleep(5 * time.Millisecond)
			}
			close(finish)
			a := <-done
			if a.err != nil {
				t.Fatalf("%s %v during the install = %v, want it to wait for the install, then succeed", tc.verb, tc.names, a.err)
			}
			for _, r := range a.res {
				if r.Error != "" || r.Refused {
					t.Errorf("%s %v: result %+v, want no error", tc.verb, tc.names, r)
				}
			}
			if n := early.Load(); n != 0 {
				t.Errorf("Check ran %d times before the install finished, want 0", n)
			}
			waitState(t, s, "app", time.Minute, Running)
			waitState(t, s, "other", time.Minute, Running)
		})
	}
}

// TestControlWaitingForInstallEndsWithItsContext: a start or restart
// waiting for the install on start ends when its caller's context does
// (a Ctrl-C of hbx start), naming what it waited for and the cause;
// nothing is started, and the install goes on.
func TestControlWaitingForInstallEndsWithItsContext(t *testing.T) {
	for _, verb := range []string{"start", "restart"} {
		t.Run(verb, func(t *testing.T) {
			var checks atomic.Int32
			app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
			app.Check = func(context.Context) error { checks.Add(1); return nil }
			installing, finish := make(chan struct{}), make(chan struct{})
			t.Cleanup(func() { close(finish) })
			install := func(ctx context.Context, progress func(string)) error {
				close(installing)
				select {
				case <-finish:
				case <-ctx.Done():
				}
				return ctx.Err()
			}
			s := startSupervisor(t, Options{Programs: []Program{app}, Install: install, InstallProgram: "app"})
			select {
			case <-installing:
			case <-time.After(time.Minute):
				t.Fatal("the install on start did not begin within a minute")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			call := s.Start
			if verb == "restart" {
				call = s.Restart
			}
			res, err := call(ctx, "app")
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "wait for the install on start to finish") {
				t.Fatalf("%s app while the install runs, ctx ending = %v, %v; want the wait named and context.DeadlineExceeded", verb, res, err)
			}
			if n := checks.Load(); n != 0 {
				t.Errorf("Check ran %d times, want 0: nothing is judged before the install ends", n)
			}
			if st := s.Status()[0]; st.PID != 0 {
				t.Errorf("app = %+v, want nothing started", st)
			}
		})
	}
}
