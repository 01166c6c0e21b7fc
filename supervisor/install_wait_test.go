package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
)

// installGate starts a supervisor over programs whose install on start
// blocks until the returned finish is called (or the supervisor shuts
// down); it returns once the install runs. bind, when not nil, is set
// to the supervisor before it runs. waits counts the log's "waits
// for the install on start" lines, spawns the "spawned" ones (every fork
// of a program, also of one killed before it could record its start).
func installGate(t *testing.T, programs []Program, bind **Supervisor) (s *Supervisor, finish func(), waits, spawns *atomic.Int32) {
	t.Helper()
	s, finish, waits, spawns, _, _ = installGateSocket(t, programs, bind)
	return s, finish, waits, spawns
}

// installGateSocket is installGate with a control socket (sock) and a
// count of the log's "gave up waiting for the install" lines (gaveUp).
func installGateSocket(t *testing.T, programs []Program, bind **Supervisor) (s *Supervisor, finish func(), waits, spawns *atomic.Int32, sock string, gaveUp *atomic.Int32) {
	t.Helper()
	installing, done := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	finish = func() {
		if once.CompareAndSwap(false, true) {
			close(done)
		}
	}
	t.Cleanup(finish)
	install := func(ctx context.Context, _ func(string)) error {
		close(installing)
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	waits, spawns, gaveUp = new(atomic.Int32), new(atomic.Int32), new(atomic.Int32)
	var h slog.Handler = testenv.MessageCounter{Handler: testLogger(t).Handler(), Sub: "waits for the install on start", N: waits}
	h = testenv.MessageCounter{Handler: h, Sub: "spawned", N: spawns}
	h = testenv.MessageCounter{Handler: h, Sub: "gave up waiting for the install", N: gaveUp}
	if bind == nil {
		bind = new(*Supervisor)
	}
	sockDir, err := os.MkdirTemp("", "hbx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock = filepath.Join(sockDir, "hbx.sock")
	s = startSupervisor(t, Options{Programs: programs, Socket: sock, Logger: slog.New(h), Install: install, InstallProgram: programs[0].Name}, bind)
	select {
	case <-installing:
	case <-time.After(time.Minute):
		t.Fatal("the install on start did not begin within a minute")
	}
	return s, finish, waits, spawns, sock, gaveUp
}

// awaitWaits polls (a minute at most) until waits counts n calls waiting
// for the install.
func awaitWaits(t *testing.T, waits *atomic.Int32, n int32) {
	t.Helper()
	for bound := time.Now().Add(time.Minute); waits.Load() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(bound) {
			t.Fatalf("%d calls said they wait for the install within a minute, want %d", waits.Load(), n)
		}
	}
}

// TestRestartWaitingForInstallBootsOnce: a restart asked for while the
// install on start runs (hbx restart executor during the first boot) has
// one effect: one start after the install. A program the supervisor
// autostarts after the install satisfies it (it started after the
// request); one that does not autostart is started by it. Before, the
// restart stopped the autostarted program and started it again: two
// boots of Executor, the first killed mid-start. The Check waits for the
// autostart's spawn, so the restart always comes after it.
func TestRestartWaitingForInstallBootsOnce(t *testing.T) {
	for _, autostart := range []bool{true, false} {
		t.Run(map[bool]string{true: "autostart", false: "no autostart"}[autostart], func(t *testing.T) {
			app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
			app.Autostart = autostart
			var s *Supervisor
			app.Check = func(ctx context.Context) error {
				for autostart && s.Get("app").PID == 0 {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(5 * time.Millisecond):
					}
				}
				return nil
			}
			_, finish, waits, spawns := installGate(t, []Program{app}, &s)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			type answer struct {
				res []Result
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := s.Restart(ctx, "app")
				done <- answer{res, err}
			}()
			awaitWaits(t, waits, 1)
			finish()
			a := <-done
			if a.err != nil || len(a.res) != 1 || a.res[0].Error != "" || a.res[0].State != Running {
				t.Fatalf("Restart(app) waiting for the install = %+v, %v; want app RUNNING", a.res, a.err)
			}
			if n := spawns.Load(); n != 1 {
				t.Errorf("app spawned %d times, want 1: the restart asked for during the install is one start after it", n)
			}
		})
	}
}

// TestStopAndHoldWaitingForInstallEndWithTheirContext: a stop or hold
// waiting for the install on start ends when its caller's context does
// (a client gone away), naming the wait and the cause; nothing is
// stopped nor held: the program autostarts after the install and is not
// held. Before, both waited for the install whatever the context.
func TestStopAndHoldWaitingForInstallEndWithTheirContext(t *testing.T) {
	for _, verb := range []string{"stop", "hold"} {
		t.Run(verb, func(t *testing.T) {
			app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
			s, finish, _, _ := installGate(t, []Program{app}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				var err error
				if verb == "stop" {
					_, err = s.Stop(ctx, "app")
				} else {
					var release func()
					if _, release, err = s.Hold(ctx, "app"); release != nil {
						release()
					}
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatalf("%s app waiting for the install did not end a minute after its context", verb)
			}
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "wait for the install on start to finish") {
				t.Fatalf("%s app while the install runs, ctx ending = %v; want the wait named and context.DeadlineExceeded", verb, err)
			}
			finish()
			if st := waitState(t, s, "app", time.Minute, Running); st.Held {
				t.Errorf("app = %+v after the install, want not held", st)
			}
		})
	}
}

// TestStopAndHoldWaitingForInstallAnswerShutdown: a stop or hold waiting
// for the install on start when the supervisor shuts down is answered
// ErrShuttingDown (as a start or restart is), nothing held. Before, it
// went on once the loops ran and answered as if it had stopped or held.
func TestStopAndHoldWaitingForInstallAnswerShutdown(t *testing.T) {
	for _, verb := range []string{"stop", "hold"} {
		t.Run(verb, func(t *testing.T) {
			app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
			s, _, waits, _ := installGate(t, []Program{app}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			type answer struct {
				res     []Result
				release func()
				err     error
			}
			done := make(chan answer, 1)
			go func() {
				var a answer
				if verb == "stop" {
					a.res, a.err = s.Stop(ctx, "app")
				} else {
					a.res, a.release, a.err = s.Hold(ctx, "app")
				}
				done <- a
			}()
			awaitWaits(t, waits, 1)
			s.Shutdown()
			var a answer
			select {
			case a = <-done:
			case <-time.After(time.Minute):
				t.Fatalf("%s waiting for the install not answered a minute after the shutdown", verb)
			}
			if a.release != nil {
				a.release()
			}
			shutting := errors.Is(a.err, ErrShuttingDown)
			for _, r := range a.res {
				shutting = shutting || strings.Contains(r.Error, ErrShuttingDown.Error())
			}
			if !shutting {
				t.Errorf("%s during the install, then shutdown = %+v, %v; want it to say %q", verb, a.res, a.err, ErrShuttingDown)
			}
			if verb == "hold" && (a.err == nil || a.release != nil) {
				t.Errorf("hold during the install, then shutdown: err %v, release %v; want an error and no hold", a.err, a.release != nil)
			}
			<-s.stopped
		})
	}
}

// TestStopAndHoldOverTheSocketEndWhenTheClientGoesAway: hbx stop or a
// hold (hbx backup's) waiting for the install on start ends, in the
// supervisor, when its client goes away (a Ctrl-C): the supervisor logs
// that it gave up, and once the install is over nothing was stopped nor
// held, the program spawned once. Before, the request waited for the
// install whatever its client, then stopped the program for nobody. The
// client's error is its context's cause (a hold's said "use of closed
// network connection": hbx restore's Ctrl-C read as a socket fault).
func TestStopAndHoldOverTheSocketEndWhenTheClientGoesAway(t *testing.T) {
	for _, verb := range []string{"stop", "hold"} {
		t.Run(verb, func(t *testing.T) {
			app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
			s, finish, waits, spawns, sock, gaveUp := installGateSocket(t, []Program{app}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c, err := Dial(ctx, sock)
			if err != nil {
				t.Fatal(err)
			}
			callCtx, callCancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				var err error
				if verb == "stop" {
					_, err = c.Stop(callCtx, "app")
				} else {
					var h *Hold
					if h, err = c.Hold(callCtx, "app"); h != nil {
						h.Release()
					}
				}
				done <- err
			}()
			awaitWaits(t, waits, 1)
			callCancel() // the client goes away
			if err := <-done; !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "closed network connection") {
				t.Fatalf("%s over the socket, its context cancelled, = %v, want the context's cause (context.Canceled), not the connection it closed", verb, err)
			}
			for bound := time.Now().Add(time.Minute); gaveUp.Load() == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(bound) {
					t.Fatalf("the supervisor still waits for the install on a %s whose client went away a minute ago", verb)
				}
			}
			finish()
			if st := waitState(t, s, "app", time.Minute, Running); st.Held {
				t.Errorf("app = %+v after the install, want not held", st)
			}
			if n := spawns.Load(); n != 1 {
				t.Errorf("app spawned %d times, want 1: nothing stopped", n)
			}
		})
	}
}

// TestStopAndHoldWaitingForInstallComeAfterTheAutostart: a stop or hold
// (hbx backup's) asked for while the install on start runs is acted on
// after the autostart: once the stop has answered and the autostart is
// over (a later program spawned), the program is STOPPED, not running;
// a held one is not running and, the hold released, starts again (the
// hold found it starting). Before, the waiting call woke when the loops
// ran, before the autostart was sent: its stop could come first, then the
// autostart started the program the stop had reported STOPPED, or the
// one a backup held, beside the backup. A race: tried several times.
func TestStopAndHoldWaitingForInstallComeAfterTheAutostart(t *testing.T) {
	for _, verb := range []string{"stop", "hold"} {
		for try := range 6 {
			t.Run(fmt.Sprintf("%s/%d", verb, try), func(t *testing.T) {
				app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
				app.Priority = 1
				later := helperProgram(t, progDir(t, "later"), "later", "sleep", "")
				later.Priority = 2
				s, finish, waits, _ := installGate(t, []Program{app, later}, nil)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				type answer struct {
					res     []Result
					release func()
					err     error
				}
				done := make(chan answer, 1)
				go func() {
					var a answer
					if verb == "stop" {
						a.res, a.err = s.Stop(ctx, "app")
					} else {
						a.res, a.release, a.err = s.Hold(ctx, "app")
					}
					done <- a
				}()
				awaitWaits(t, waits, 1)
				finish()
				a := <-done
				if a.err != nil || len(a.res) != 1 || a.res[0].Error != "" {
					t.Fatalf("%s app waiting for the install = %+v, %v; want it done", verb, a.res, a.err)
				}
				// The autostart sends its starts in priority order, each
				// accepted once forked: later's spawn means app's was sent.
				for bound := time.Now().Add(time.Minute); s.Get("later").PID == 0; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(bound) {
						t.Fatal("later not spawned within a minute of the install")
					}
				}
				if st := s.Get("app"); st.State != Stopped || st.PID != 0 {
					t.Fatalf("app after %s waiting for the install and the autostart = %+v; want STOPPED, no process", verb, st)
				}
				if verb == "hold" {
					if !a.res[0].Restart {
						t.Errorf("hold's result %+v: want Restart (the hold found app starting)", a.res[0])
					}
					a.release()
					waitState(t, s, "app", time.Minute, Running)
				}
			})
		}
	}
}

// TestRestartWaitingForInstallRestartsWhatStartedBeforeIt: a restart
// asked for after the autostart forked a program, but before the
// supervisor was ready (a later program's start still being prepared),
// waits, then restarts that program: it started before the request (an
// Executor reading the env and token files the operator changed since),
// so "one start after the install" does not cover it. Before, the
// restart took the process that predates it for its own start.
func TestRestartWaitingForInstallRestartsWhatStartedBeforeIt(t *testing.T) {
	app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
	app.Priority = 1
	slow := helperProgram(t, progDir(t, "slow"), "slow", "sleep", "")
	slow.Priority = 2
	building, build := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-build:
		default:
			close(build)
		}
	})
	slow.Build = func(ctx context.Context) (*Command, error) {
		close(building)
		select {
		case <-build:
		case <-ctx.Done():
		}
		return nil, errors.New("not this one")
	}
	s, finish, waits, _ := installGate(t, []Program{app, slow}, nil)
	finish()
	select {
	case <-building: // app forked, slow's start being prepared: not ready yet
	case <-time.After(time.Minute):
		t.Fatal("slow's start not prepared within a minute of the install")
	}
	first := s.Get("app").PID
	if first == 0 {
		t.Fatal("app not forked before slow's start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type answer struct {
		res []Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := s.Restart(ctx, "app")
		done <- answer{res, err}
	}()
	awaitWaits(t, waits, 1)
	close(build)
	a := <-done
	if a.err != nil || len(a.res) != 1 || a.res[0].Error != "" || a.res[0].State != Running {
		t.Fatalf("Restart(app) = %+v, %v; want app RUNNING", a.res, a.err)
	}
	if st := s.Get("app"); st.PID == first {
		t.Errorf("app after a restart asked for after its spawn = %+v: still pid %d, the process that predates the restart", st, first)
	}
}

// TestCallsWaitingForAFailedInstallAreAnswered: a stop, a hold and a
// restart waiting at once for an install on start that fails (not
// retried: FATAL) are each answered once it is over: the stop and the
// hold find the program FATAL, not started (the hold, released, starts
// nothing), and the restart, judged by the program's Check against what
// the failed install left, is refused, nothing started.
func TestCallsWaitingForAFailedInstallAreAnswered(t *testing.T) {
	app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
	app.Check = func(context.Context) error { return errors.New("release not installed") }
	installing, fail := make(chan struct{}), make(chan struct{})
	install := func(ctx context.Context, _ func(string)) error {
		close(installing)
		select {
		case <-fail:
			return fmt.Errorf("pull the image: %w", ErrNoRetry)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	waits := new(atomic.Int32)
	h := testenv.MessageCounter{Handler: testLogger(t).Handler(), Sub: "waits for the install on start", N: waits}
	s := startSupervisor(t, Options{Programs: []Program{app}, Logger: slog.New(h), Install: install, InstallProgram: "app"})
	<-installing
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type answer struct {
		verb    string
		res     []Result
		release func()
		err     error
	}
	done := make(chan answer, 3)
	go func() { res, err := s.Stop(ctx, "app"); done <- answer{"stop", res, nil, err} }()
	go func() { res, rel, err := s.Hold(ctx, "app"); done <- answer{"hold", res, rel, err} }()
	go func() { res, err := s.Restart(ctx, "app"); done <- answer{"restart", res, nil, err} }()
	awaitWaits(t, waits, 3)
	close(fail)
	for range 3 {
		var a answer
		select {
		case a = <-done:
		case <-time.After(time.Minute):
			t.Fatal("a call waiting for the failed install not answered within a minute")
		}
		switch a.verb {
		case "restart":
			if !errors.Is(a.err, ErrRefused) {
				t.Errorf("restart waiting for a failed install = %+v, %v; want it refused", a.res, a.err)
			}
		default:
			if a.err != nil || len(a.res) != 1 || a.res[0].State != Fatal || a.res[0].Restart {
				t.Errorf("%s waiting for a failed install = %+v, %v; want app FATAL, nothing to start again", a.verb, a.res, a.err)
			}
			if a.release != nil {
				a.release()
			}
		}
	}
	if st := s.Get("app"); st.State != Fatal || st.PID != 0 || st.Held {
		t.Errorf("app after the failed install and the calls = %+v; want FATAL, no process, not held", st)
	}
}
