package supervisor

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestCallsAfterRunAreAnsweredAtOnce: once Run has returned (a shutdown,
// or a start that failed), no program loop takes requests and no state
// changes: a Stop, a Start and a WaitState for a state not reached
// answer at once with ErrShuttingDown (and why Run did not start),
// instead of waiting for their context to end.
func TestCallsAfterRunAreAnsweredAtOnce(t *testing.T) {
	for _, failed := range []bool{false, true} {
		name := map[bool]string{false: "after a shutdown", true: "after a failed start"}[failed]
		t.Run(name, func(t *testing.T) {
			app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
			if failed {
				if err := os.Mkdir(app.Stderr.Path, 0o755); err != nil { // not a file it can append to
					t.Fatal(err)
				}
			}
			s, err := New(Options{Programs: []Program{app}, Env: os.Environ(), Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(context.Background())
			runErr := make(chan error, 1)
			go func() { runErr <- s.Run(rctx) }()
			if !failed {
				waitState(t, s, "app", 30*time.Second, Running)
			}
			cancel()
			select {
			case err := <-runErr:
				if failed != (err != nil) {
					t.Fatalf("Run() = %v, want an error only for the failed start", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Run() did not return")
			}
			ctx, stop := context.WithTimeout(context.Background(), time.Minute)
			defer stop()
			if res, err := s.Stop(ctx, "app"); !failed && (err != nil || len(res) != 1 || res[0].Error != ErrShuttingDown.Error()) || failed && err == nil {
				t.Errorf("Stop after Run returned = %+v, %v; want at once, ErrShuttingDown", res, err)
			}
			if res, err := s.Start(ctx, "app"); !failed && (err != nil || len(res) != 1 || res[0].Error != ErrShuttingDown.Error()) || failed && !errors.Is(err, ErrShuttingDown) {
				t.Errorf("Start after Run returned = %+v, %v; want at once, ErrShuttingDown", res, err)
			}
			if _, err := s.WaitState(ctx, "app", Running); !errors.Is(err, ErrShuttingDown) {
				t.Errorf("WaitState(RUNNING) after Run returned = %v, want at once, ErrShuttingDown", err)
			}
			if st, err := s.WaitState(ctx, "app", Stopped); err != nil {
				t.Errorf("WaitState(STOPPED) after Run returned = %s, %v; want STOPPED, nil", st.State, err)
			}
			if ctx.Err() != nil {
				t.Errorf("the calls waited for their context to end")
			}
		})
	}
}
