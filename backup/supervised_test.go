package backup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/internal/supervision"
)

// fakeSupervisor is a Supervisor whose programs' states the test sets;
// a start makes the started programs RUNNING unless held > 0 (then it
// counts one refusal down).
type fakeSupervisor struct {
	mu        sync.Mutex
	states    map[string]ProgramState
	order     []string
	holdErr   map[string]string // name -> error of its hold result
	held      int               // starts still refused as held
	started   [][]string
	released  int
	statusErr error
	waitErr   error // WaitRunning's answer, when set
}

func newFake(states ...ProgramState) *fakeSupervisor {
	f := &fakeSupervisor{states: map[string]ProgramState{}, holdErr: map[string]string{}}
	for _, st := range states {
		f.states[st.Name] = st
		f.order = append(f.order, st.Name)
	}
	return f
}

func (f *fakeSupervisor) set(name string, state supervision.State, detail string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states[name] = ProgramState{name, state, detail}
}

func (f *fakeSupervisor) Status(context.Context) ([]ProgramState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.statusErr != nil {
		return nil, f.statusErr
	}
	var out []ProgramState
	for _, n := range f.order {
		out = append(out, f.states[n])
	}
	return out, nil
}

func (f *fakeSupervisor) HoldAll(context.Context) (ProgramHold, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := ProgramHold{Release: func() error { f.mu.Lock(); f.released++; f.mu.Unlock(); return nil }}
	for _, n := range f.order {
		st := ProgramState{Name: n, State: supervision.Stopped, Detail: f.holdErr[n]}
		if st.Detail != "" {
			st.State = supervision.Stopping
		}
		f.states[n] = ProgramState{Name: n, State: st.State}
		h.Results = append(h.Results, st)
	}
	return h, nil
}

func (f *fakeSupervisor) Start(_ context.Context, names ...string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held > 0 {
		f.held--
		return true, nil
	}
	f.started = append(f.started, names)
	for _, n := range names {
		f.states[n] = ProgramState{Name: n, State: supervision.Running}
	}
	return false, nil
}

// WaitRunning waits as the supervisor does: until every name is RUNNING,
// failing at once on a FATAL one (supervision.ErrFatal), or until ctx
// ends.
func (f *fakeSupervisor) WaitRunning(ctx context.Context, names ...string) error {
	if f.waitErr != nil {
		return f.waitErr
	}
	for {
		sts, err := f.Status(ctx)
		if err != nil {
			return err
		}
		waiting := ""
		for _, st := range sts {
			if !slices.Contains(names, st.Name) {
				continue
			}
			if st.State == supervision.Fatal {
				return fmt.Errorf("wait for %s to be RUNNING: %w: %s: %s", strings.Join(names, ", "), supervision.ErrFatal, st.Name, st.Detail)
			}
			if st.State != supervision.Running && waiting == "" {
				waiting = st.Name
			}
		}
		if waiting == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to be RUNNING: %w", strings.Join(names, ", "), ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

type probeFunc func(context.Context) error

func (p probeFunc) Check(ctx context.Context) error { return p(ctx) }

type fakeWatch struct{ gone chan struct{} }

func (w *fakeWatch) Gone() <-chan struct{} { return w.gone }
func (w *fakeWatch) Close()                {}

func fastSupervised(f *fakeSupervisor, probe Probe, auto []string, w SupervisedWatch) *Supervised {
	s := NewSupervised(f, probe, auto, w)
	s.Poll, s.HeldRetry = time.Millisecond, time.Millisecond
	return s
}

var passes = probeFunc(func(context.Context) error { return nil })

// TestSupervisedHoldRunning: a hold reports the programs STARTING, RUNNING
// or in BACKOFF before it as the ones its release starts again.
func TestSupervisedHoldRunning(t *testing.T) {
	f := newFake(ProgramState{"executor", supervision.Running, ""}, ProgramState{"hermes", supervision.Backoff, ""},
		ProgramState{"other", supervision.Stopped, ""}, ProgramState{"late", supervision.Starting, ""}, ProgramState{"dead", supervision.Fatal, "x"})
	s := fastSupervised(f, passes, nil, nil)
	h, err := s.Hold(context.Background())
	if err != nil {
		t.Fatalf("Hold() = %v", err)
	}
	if diff := cmp.Diff(h.Running(), []string{"executor", "hermes", "late"}); diff != "" {
		t.Errorf("Hold().Running() (-got +want):\n%s", diff)
	}
	if err := h.Release(); err != nil || f.released != 1 {
		t.Errorf("Release() = %v, released %d times, want nil, 1", err, f.released)
	}
}

// TestSupervisedHoldNotStopped: a program the hold could not stop fails
// the hold with ErrNotStopped naming it, and the hold is released.
func TestSupervisedHoldNotStopped(t *testing.T) {
	f := newFake(ProgramState{"executor", supervision.Running, ""})
	f.holdErr["executor"] = "did not exit"
	s := fastSupervised(f, passes, nil, nil)
	_, err := s.Hold(context.Background())
	if !errors.Is(err, ErrNotStopped) || err.Error() != "services did not stop: executor is STOPPING: did not exit" {
		t.Errorf("Hold() = %v, want ErrNotStopped naming executor", err)
	}
	if f.released != 1 {
		t.Errorf("released %d times, want 1", f.released)
	}
}

// TestSupervisedWaitHealthy: WaitHealthy starts only the autostart
// programs the hold did not stop, again while the supervisor still
// refuses them as held, and waits for RUNNING and the probe.
func TestSupervisedWaitHealthy(t *testing.T) {
	f := newFake(ProgramState{"executor", supervision.Running, ""}, ProgramState{"hermes", supervision.Stopped, ""})
	probes := 0
	probe := probeFunc(func(context.Context) error {
		if probes++; probes < 3 {
			return errors.New("not healthy yet")
		}
		return nil
	})
	s := fastSupervised(f, probe, []string{"executor", "hermes"}, nil)
	h, err := s.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Release()
	f.set("executor", supervision.Running, "") // the supervisor started what it stopped
	f.held = 2
	if err := s.WaitHealthy(context.Background()); err != nil {
		t.Fatalf("WaitHealthy() = %v", err)
	}
	if diff := cmp.Diff(f.started, [][]string{{"hermes"}}); diff != "" {
		t.Errorf("started (-got +want):\n%s", diff)
	}
	if probes != 3 || f.held != 0 {
		t.Errorf("probes = %d, held refusals left = %d, want 3, 0", probes, f.held)
	}
}

// TestSupervisedWaitRunningFails: WaitRunning fails at once on a FATAL
// program, on a supervisor that no longer answers, on a broken watch, and
// says the last state seen when ctx ends.
func TestSupervisedWaitRunningFails(t *testing.T) {
	notRunning := errors.New("no supervisor answers")
	ctx := context.Background()

	f := newFake(ProgramState{"executor", supervision.Fatal, "exited too quickly"})
	s := fastSupervised(f, passes, nil, nil)
	if err := s.WaitRunning(ctx, []string{"executor"}); !errors.Is(err, supervision.ErrFatal) || !strings.HasSuffix(err.Error(), "executor: exited too quickly") {
		t.Errorf("WaitRunning(FATAL) = %v", err)
	}

	f = newFake(ProgramState{"executor", supervision.Running, ""})
	f.statusErr = notRunning
	s = fastSupervised(f, passes, nil, nil)
	s.NotRunning = notRunning
	if err := s.WaitRunning(ctx, []string{"executor"}); !errors.Is(err, notRunning) || !strings.HasPrefix(err.Error(), "the supervisor is gone: ") {
		t.Errorf("WaitRunning(not running) = %v", err)
	}

	// A supervisor shutting down answers the wait so: no program comes up,
	// the wait ends at once (not at ctx's end).
	shuttingDown := errors.New("supervisor is shutting down")
	f = newFake(ProgramState{"executor", supervision.Stopping, ""})
	f.waitErr = shuttingDown
	s = fastSupervised(f, passes, nil, nil)
	s.ShuttingDown = shuttingDown
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := s.WaitRunning(sctx, []string{"executor"}); !errors.Is(err, shuttingDown) || sctx.Err() != nil || !strings.HasPrefix(err.Error(), "the programs will not start again: ") {
		t.Errorf("WaitRunning(shutting down) = %v (ctx %v), want at once, wrapping the shutdown", err, sctx.Err())
	}

	w := &fakeWatch{gone: make(chan struct{})}
	f = newFake(ProgramState{"hermes", supervision.Starting, ""})
	s = fastSupervised(f, passes, nil, w)
	go func() { time.Sleep(5 * time.Millisecond); close(w.gone) }()
	if err := s.WaitRunning(ctx, []string{"hermes"}); err != errSupervisorGone || !errors.Is(err, ErrSupervisorGone) {
		t.Errorf("WaitRunning(gone) = %v, want %v wrapping ErrSupervisorGone", err, errSupervisorGone)
	}
	if msg := errSupervisorGone.Error(); strings.Contains(msg, "died with") || !strings.Contains(msg, "stopped by the next hbx supervise") {
		t.Errorf("errSupervisorGone = %q: want what is true (processes may live on until the next hbx supervise), not that they died", msg)
	}

	f = newFake(ProgramState{"hermes", supervision.Starting, ""})
	s = fastSupervised(f, passes, nil, nil)
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.WaitRunning(tctx, []string{"hermes"}); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "(last: hermes is STARTING)") {
		t.Errorf("WaitRunning(timeout) = %v", err)
	}

	// Executor among the names: the probe must pass too.
	f = newFake(ProgramState{"executor", supervision.Running, ""})
	s = fastSupervised(f, probeFunc(func(context.Context) error { return errors.New("503") }), nil, nil)
	tctx, cancel = context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.WaitRunning(tctx, []string{"executor"}); err == nil || !strings.Contains(err.Error(), "(last: 503)") {
		t.Errorf("WaitRunning(probe fails) = %v", err)
	}
}
