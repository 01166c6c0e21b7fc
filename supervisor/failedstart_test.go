package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
)

// TestCallsWaitingForAFailedStartAreAnswered: calls made while the
// install on start runs (in the process and over the socket: start,
// stop, restart, hold, wait) wait for it; when the start then fails (a
// log path that became a directory during the install, refused as
// ErrLogNotRegular like a FIFO), each is answered at once with why,
// "supervisor did not start: program app: open log ...", ErrShuttingDown
// over the socket too, and
// so is a call made after Run returned. Before, Run returned its
// StartError and left them waiting for good: the calls in the process
// hung forever, those on the socket got a dropped connection; and a
// directory was an "open PATH: is a directory" that repeated the path.
func TestCallsWaitingForAFailedStartAreAnswered(t *testing.T) {
	dir := progDir(t, "app")
	app := helperProgram(t, dir, "app", "sleep", "")
	sock := filepath.Join(socketDir(t), "hbx.sock")

	installing, finish := make(chan struct{}), make(chan struct{})
	waits := new(atomic.Int32)
	s, err := New(Options{
		Programs: []Program{app},
		Socket:   sock,
		Env:      os.Environ(),
		Logger:   slog.New(testenv.MessageCounter{Handler: testLogger(t).Handler(), Sub: "waits for the install on start", N: waits}),
		Install: func(ctx context.Context, _ func(string)) error {
			close(installing)
			select {
			case <-finish:
				// Made during the install, past checkLogs: a log path
				// that became a directory, not a file it can append to.
				return os.Mkdir(app.Stderr.Path, 0o755)
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		InstallProgram: "app",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx) }()
	select {
	case <-installing:
	case <-time.After(time.Minute):
		t.Fatal("the install on start did not begin within a minute")
	}
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}

	// Every call gets context.Background() where it takes one: only the
	// supervisor's answer can end it.
	bg := context.Background()
	calls := map[string]func() error{
		"Start": func() error { _, err := s.Start(bg, "app"); return err },
		"Stop":  func() error { _, err := s.Stop(bg, "app"); return err },
		"Hold": func() error {
			_, release, err := s.Hold(bg, "app")
			if release != nil {
				release()
			}
			return err
		},
		"client Start":   func() error { _, err := c.Start(bg, "app"); return err },
		"client Restart": func() error { _, err := c.Restart(bg, "app"); return err },
		"client Stop":    func() error { _, err := c.Stop(bg, "app"); return err },
		"client Hold": func() error {
			h, err := c.Hold(bg, "all")
			if h != nil {
				h.Release()
			}
			return err
		},
	}
	type answer struct {
		name string
		err  error
	}
	answers := make(chan answer, len(calls)+2)
	for name, call := range calls {
		go func() { answers <- answer{name, call()} }()
	}
	awaitWaits(t, waits, int32(len(calls)))
	// WaitRunning and a shutdown log nothing when they wait: asked
	// before the install ends, they are answered as the others are.
	go func() { _, err := s.WaitRunning(bg, "app"); answers <- answer{"WaitRunning", err} }()
	close(finish)

	var got error
	select {
	case got = <-runErr:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return a minute after the install ended")
	}
	wantMsg := "program app: open log " + app.Stderr.Path + ": log is not a regular file: a directory; remove it or log to another path"
	if !IsStartError(got) || !errors.Is(got, ErrLogNotRegular) || got.Error() != wantMsg {
		t.Fatalf("Run() = %v, want a StartError %q, ErrLogNotRegular", got, wantMsg)
	}
	for range len(calls) + 1 {
		var a answer
		select {
		case a = <-answers:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d calls not answered 30s after Run returned %v", len(calls)+1, got)
		}
		msg := ""
		if a.err != nil {
			msg = a.err.Error()
		}
		if !errors.Is(a.err, ErrShuttingDown) || msg != "supervisor did not start: "+wantMsg {
			t.Errorf("%s during the install, then the start failed = %v; want %q, ErrShuttingDown", a.name, a.err, "supervisor did not start: "+wantMsg)
		}
	}
	// And later calls too, with no socket left.
	if _, err := s.Stop(bg, "app"); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("Stop after Run returned %v = %v, want ErrShuttingDown", got, err)
	}
}

// TestShutdownDuringAFailedStartIsAnswered: a shutdown asked for over
// the socket while the install on start runs ends the install, and when
// the start then fails (a log it cannot open) the shutdown is answered as
// done: nothing runs. Before, it waited for "every program stopped",
// which never came, until the connection dropped.
func TestShutdownDuringAFailedStartIsAnswered(t *testing.T) {
	dir := progDir(t, "app")
	app := helperProgram(t, dir, "app", "sleep", "")
	sock := filepath.Join(socketDir(t), "hbx.sock")
	installing := make(chan struct{})
	s, err := New(Options{
		Programs: []Program{app},
		Socket:   sock,
		Logger:   testLogger(t),
		Install: func(ctx context.Context, _ func(string)) error {
			close(installing)
			<-ctx.Done()
			// Made during the install, past checkLogs.
			if err := os.Mkdir(app.Stdout.Path, 0o755); err != nil {
				return err
			}
			return ctx.Err()
		},
		InstallProgram: "app",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx) }()
	<-installing
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown() during an install whose start then fails = %v, want nil", err)
	}
	if err := <-runErr; !IsStartError(err) || !errors.Is(err, ErrLogNotRegular) {
		t.Errorf("Run() = %v, want a StartError, ErrLogNotRegular", err)
	}
}
