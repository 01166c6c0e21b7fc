package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// errBadFile is the class of Check errors the tests carry over the socket.
var errBadFile = errors.New("bad env file")

// refusalBox runs programs "a" (its Check fails with check) and "b" (no
// Check), both sleeping helpers, RUNNING, with a control socket; restart
// and start are the supervisor's own or, viaAPI, its client's (with the
// test's ErrorClasses).
func refusalBox(t *testing.T, check error, viaAPI bool) (s *Supervisor, c *Client, dirs map[string]string) {
	t.Helper()
	dirs = map[string]string{"a": progDir(t, "a"), "b": progDir(t, "b")}
	pa := helperProgram(t, dirs["a"], "a", "sleep", "")
	pa.Check = func(context.Context) error { return check }
	pb := helperProgram(t, dirs["b"], "b", "sleep", "")
	sockDir, err := os.MkdirTemp("", "hbx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "hbx.sock")
	classes := []ErrorClass{{Code: "env_file", Err: errBadFile}}
	s = runSupervisor(t, Options{Programs: []Program{pa, pb}, Socket: sock, ErrorClasses: classes})
	for n, d := range dirs {
		waitState(t, s, n, 30*time.Second, Running)
		waitStarts(t, d, 1)
	}
	if viaAPI {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err = Dial(ctx, sock); err != nil {
			t.Fatal(err)
		}
		c.Classes = classes
	}
	return s, c, dirs
}

// TestRestartAllRefusesEachOnItsOwn proves that `restart all` (as
// supervisorctl's) restarts every program whose Check passes and refuses
// only the one whose Check fails: that one keeps its pid and RUNNING and
// gets a Result with Refused, its "restart a: why; nothing stopped" and
// the code of its error's class; ControlText prints a line for it and
// fails (ErrSomeFailed, ErrRefused, and over the socket the class's
// sentinel). Before, the whole restart was refused and b never restarted.
func TestRestartAllRefusesEachOnItsOwn(t *testing.T) {
	for _, viaAPI := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "over the socket"}[viaAPI], func(t *testing.T) {
			check := errors.Join(errBadFile)
			s, c, dirs := refusalBox(t, check, viaAPI)
			beforeA, beforeB := s.Get("a"), s.Get("b")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			restart := s.Restart
			if viaAPI {
				restart = c.Restart
			}
			res, err := restart(ctx, "all")
			if err != nil || len(res) != 2 {
				t.Fatalf("Restart(all) = %+v, %v; want two results", res, err)
			}
			want := "restart a: bad env file; nothing stopped"
			if r := res[0]; r.Name != "a" || !r.Refused || r.Error != want || r.Class != "env_file" || r.State != Running {
				t.Errorf("Restart(all)[0] = %+v; want a refused, RUNNING, %q, class env_file", r, want)
			}
			if r := res[1]; r.Name != "b" || r.Refused || r.Error != "" {
				t.Errorf("Restart(all)[1] = %+v; want b restarted", r)
			}
			waitStarts(t, dirs["b"], 2)
			if after := waitState(t, s, "b", 30*time.Second, Running); after.PID == beforeB.PID {
				t.Errorf("b kept pid %d: want it restarted", after.PID)
			}
			if after := s.Get("a"); after.PID != beforeA.PID || after.State != Running || len(starts(t, dirs["a"])) != 1 {
				t.Errorf("a %s pid %d (before %d), %d starts; want it untouched", after.State, after.PID, beforeA.PID, len(starts(t, dirs["a"])))
			}
			render := ControlText
			if viaAPI {
				render = c.ControlText
			}
			text, err := render("restart", res)
			if !strings.Contains(text, "a: ERROR ("+want+")\n") || !strings.Contains(text, "b: restarted\n") {
				t.Errorf("ControlText = %q; want a line for the refused a and b restarted", text)
			}
			if !errors.Is(err, ErrSomeFailed) || !errors.Is(err, ErrRefused) || errors.Is(err, errBadFile) != viaAPI {
				t.Errorf("ControlText error = %v; want ErrSomeFailed, ErrRefused, and errBadFile %v", err, viaAPI)
			}
		})
	}
}

// TestRefusalCarriesItsClass proves that a start or restart whose every
// program is refused fails whole (nothing stopped) and that over the
// socket the error still matches the sentinel of its class (the "class"
// of the 409 answer mapped back by Client.Classes), not only ErrRefused:
// a bad env file stays a bad env file for the caller's exit code. A cause
// of no class matches ErrRefused alone.
func TestRefusalCarriesItsClass(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check error
		class bool
	}{
		{"classed", errors.Join(errBadFile), true},
		{"no class", errors.New("release not installed"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c, _ := refusalBox(t, tc.check, true)
			before := s.Get("a")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := c.Restart(ctx, "a")
			want := "restart a: " + tc.check.Error() + "; nothing stopped"
			if err == nil || err.Error() != want || !errors.Is(err, ErrRefused) || errors.Is(err, errBadFile) != tc.class {
				t.Errorf("Restart(a) = %+v, %v; want %q, ErrRefused, errBadFile %v", res, err, want, tc.class)
			}
			if after := s.Get("a"); after.PID != before.PID || after.State != Running {
				t.Errorf("a %s pid %d after the refusal, pid %d before; want it untouched", after.State, after.PID, before.PID)
			}
		})
	}
}

// TestStartRunsTheCheck proves that Start runs the Check of a program
// that is not running, as Restart does: a stopped program its Check
// refuses is not started (it stays STOPPED, no new start, "start a: why;
// nothing started", over the socket with its class), while a RUNNING
// one's start is not checked. Before, Start spawned it and it went FATAL.
func TestStartRunsTheCheck(t *testing.T) {
	var failing atomic.Bool
	var checked atomic.Int32
	check := errors.Join(errBadFile)
	dirs := map[string]string{"a": progDir(t, "a")}
	pa := helperProgram(t, dirs["a"], "a", "sleep", "")
	pa.Check = func(context.Context) error {
		checked.Add(1)
		if failing.Load() {
			return check
		}
		return nil
	}
	sockDir, err := os.MkdirTemp("", "hbx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "hbx.sock")
	classes := []ErrorClass{{Code: "env_file", Err: errBadFile}}
	s := runSupervisor(t, Options{Programs: []Program{pa}, Socket: sock, ErrorClasses: classes})
	waitState(t, s, "a", 30*time.Second, Running)
	waitStarts(t, dirs["a"], 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	c.Classes = classes
	failing.Store(true)
	if res, err := c.Start(ctx, "a"); err != nil || len(res) != 1 || res[0].Error != "" || checked.Load() != 0 {
		t.Errorf("Start(a) while RUNNING = %+v, %v (%d checks); want a no-op, not checked", res, err, checked.Load())
	}
	if _, err := s.Stop(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	res, err := c.Start(ctx, "a")
	want := "start a: bad env file; nothing started"
	if err == nil || err.Error() != want || !errors.Is(err, ErrRefused) || !errors.Is(err, errBadFile) {
		t.Errorf("Start(a) stopped, check failing = %+v, %v; want %q wrapping ErrRefused and errBadFile", res, err, want)
	}
	if st := s.Get("a"); st.State != Stopped || len(starts(t, dirs["a"])) != 1 {
		t.Errorf("a %s, %d starts after the refused start; want STOPPED, 1 start", st.State, len(starts(t, dirs["a"])))
	}
	failing.Store(false)
	if res, err := c.Start(ctx, "a"); err != nil || len(res) != 1 || res[0].Error != "" {
		t.Errorf("Start(a), check passing = %+v, %v; want started", res, err)
	}
	waitStarts(t, dirs["a"], 2)
}
