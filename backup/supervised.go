package backup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hermesbox/hbx/internal/names"
	"github.com/hermesbox/hbx/internal/supervision"
)

// ProgramState is one supervised program as the supervisor reports it:
// its name, its state and a detail (why it is in that state; for a hold's
// result, the error that kept it from stopping, "" when it stopped).
type ProgramState struct {
	Name   string
	State  supervision.State
	Detail string
}

// ProgramHold is a hold on every program, as the supervisor granted it.
type ProgramHold struct {
	// Results says how each program was stopped; a non-empty Detail is
	// the error that kept it from stopping.
	Results []ProgramState
	// Release ends the hold.
	Release func() error
}

// Supervisor is the part of a supervisor's control socket Supervised
// drives. The composer implements it over supervisor.Client.
type Supervisor interface {
	// Status returns every program's state.
	Status(ctx context.Context) ([]ProgramState, error)
	// HoldAll stops every program and keeps them stopped until Release or
	// until this process dies.
	HoldAll(ctx context.Context) (ProgramHold, error)
	// Start starts names; it reports held when the supervisor refused
	// some because a hold (one just released) still stops them.
	Start(ctx context.Context, names ...string) (held bool, err error)
	// WaitRunning waits until names are RUNNING, failing at once on a
	// FATAL one (supervision.ErrFatal).
	supervision.RunningWaiter
}

// Probe is the readiness check Supervised runs once the programs it waits
// for are RUNNING (health.readiness, /api/health by default).
type Probe interface {
	Check(ctx context.Context) error
}

// SupervisedWatch notices that the supervisor went away (see Watcher);
// Close ends its connection.
type SupervisedWatch interface {
	Gone() <-chan struct{}
	Close()
}

// Supervised is Services (and Watcher) over a running supervisor: a hold
// on every program, then the readiness probe and every autostart program
// RUNNING.
type Supervised struct {
	sup       Supervisor
	probe     Probe
	autostart []string
	watch     SupervisedWatch
	running   []string // what the last hold found running

	// Poll is the time between a failed probe or status read and the
	// next wait for RUNNING (200ms), ProbeTimeout bounds one probe (2s) and HeldRetry is the time between
	// two starts refused as held (20ms).
	Poll, ProbeTimeout, HeldRetry time.Duration
	// NotRunning is the error (errors.Is) Status returns once no
	// supervisor answers on the socket any more; nil: none.
	NotRunning error
	// ShuttingDown is the error (errors.Is) WaitRunning returns while the
	// supervisor stops everything to exit: no program will come up, so
	// the wait ends at once; nil: none.
	ShuttingDown error
}

// NewSupervised returns Services over sup: autostart names the programs
// that should run (enabled and autostart), probe the readiness check and
// watch the supervisor's liveness (nil: never gone).
func NewSupervised(sup Supervisor, probe Probe, autostart []string, watch SupervisedWatch) *Supervised {
	return &Supervised{sup: sup, probe: probe, autostart: autostart, watch: watch,
		Poll: 200 * time.Millisecond, ProbeTimeout: 2 * time.Second, HeldRetry: 20 * time.Millisecond}
}

// noSupervisor is what became of the programs of a supervisor that is
// gone: killed, its processes live on (reparented) until the next hbx
// supervise stops them (issue 25 item 7: "died with it" was said).
const noSupervisor = "no supervisor runs them now; a process of theirs still running is stopped by the next hbx supervise before it starts them"

// errSupervisorGone is what waitUp returns once the watch broke; it
// wraps ErrSupervisorGone.
var errSupervisorGone = fmt.Errorf("%w: its programs: %s", ErrSupervisorGone, noSupervisor)

// Gone is closed once the supervisor is gone (Watcher); never with a nil
// watch.
func (s *Supervised) Gone() <-chan struct{} {
	if s.watch == nil {
		return nil
	}
	return s.watch.Gone()
}

// Close ends the watch's connection.
func (s *Supervised) Close() {
	if s.watch != nil {
		s.watch.Close()
	}
}

func (s *Supervised) isGone() bool {
	select {
	case <-s.Gone():
		return true
	default:
		return false
	}
}

// Hold stops every program and keeps them stopped while this process's
// connection lives. The programs it reports Running are those STARTING,
// RUNNING or in BACKOFF just before: the ones its release starts again.
func (s *Supervised) Hold(ctx context.Context) (Hold, error) {
	before, err := s.sup.Status(ctx)
	if err != nil {
		return nil, err
	}
	h, err := s.sup.HoldAll(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range h.Results {
		if r.Detail != "" {
			_ = h.Release()
			return nil, fmt.Errorf("%w: %s is %s: %s", ErrNotStopped, r.Name, r.State, r.Detail)
		}
	}
	s.running = runningOf(before)
	return &supervisedHold{release: h.Release, running: s.running}, nil
}

// runningOf names the programs of sts a released hold starts again.
func runningOf(sts []ProgramState) []string {
	var out []string
	for _, st := range sts {
		if st.State.HoldRestarts() {
			out = append(out, st.Name)
		}
	}
	return out
}

// WaitHealthy starts the autostart programs the last hold did not stop
// (they were not running; a released hold starts only what it stopped),
// then waits until the probe passes and every autostart program is
// RUNNING.
func (s *Supervised) WaitHealthy(ctx context.Context) error {
	var start []string
	for _, n := range s.autostart {
		if !slices.Contains(s.running, n) {
			start = append(start, n)
		}
	}
	if err := s.startHeld(ctx, start); err != nil {
		return err
	}
	return s.waitUp(ctx, s.autostart, true)
}

// startHeld starts names, again while the supervisor refuses them as
// held: it ends a released hold when it sees the connection close, and a
// start before that is refused.
func (s *Supervised) startHeld(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	for {
		held, err := s.sup.Start(ctx, names...)
		if err != nil {
			return err
		}
		if !held {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("start %s: still held: %w", strings.Join(names, ", "), ctx.Err())
		case <-time.After(s.HeldRetry):
		}
	}
}

// WaitRunning starts nothing: it waits until every program of progs is
// RUNNING and, when Executor is among them, the probe
// passes.
func (s *Supervised) WaitRunning(ctx context.Context, progs []string) error {
	return s.waitUp(ctx, progs, slices.Contains(progs, names.ExecutorProgram))
}

// waitUp waits until every program of names the supervisor runs is
// RUNNING (the supervisor's own wait, WaitRunning) and, with probe, the
// probe passes; after a failed probe it waits Poll and again for RUNNING.
// It fails at once when a program is FATAL or no supervisor answers any
// more (the programs it ran are gone with it), and when ctx ends, saying
// what it saw last.
func (s *Supervised) waitUp(ctx context.Context, names []string, probe bool) error {
	last := errors.New("not checked yet")
	for {
		if s.isGone() {
			return errSupervisorGone
		}
		err := s.waitRunning(ctx, names)
		switch {
		case s.isGone():
			return errSupervisorGone
		case s.NotRunning != nil && errors.Is(err, s.NotRunning):
			return fmt.Errorf("the supervisor is gone: %w", err)
		case s.ShuttingDown != nil && errors.Is(err, s.ShuttingDown):
			return fmt.Errorf("the programs will not start again: %w", err)
		case errors.Is(err, supervision.ErrFatal):
			return err
		case err != nil && ctx.Err() == nil:
			last = err // a read that failed: again after Poll
		case err != nil:
			return fmt.Errorf("%w (last: %w)", ctx.Err(), s.lastSeen(ctx, names, err))
		case !probe:
			return nil
		default:
			pctx, cancel := context.WithTimeout(ctx, s.ProbeTimeout)
			last = s.probe.Check(pctx)
			cancel()
			if last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
		case <-s.Gone():
		case <-time.After(s.Poll):
		}
	}
}

// waitRunning waits for the programs of names the supervisor has (a name
// it does not know is not waited for, as no program of that name can
// run), until the supervisor is gone at the latest.
func (s *Supervised) waitRunning(ctx context.Context, names []string) error {
	sts, err := s.sup.Status(ctx)
	if err != nil {
		return err
	}
	var known []string
	for _, n := range names {
		if slices.ContainsFunc(sts, func(st ProgramState) bool { return st.Name == n }) {
			known = append(known, n)
		}
	}
	if len(known) == 0 {
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if gone := s.Gone(); gone != nil {
		go func() {
			select {
			case <-gone:
				cancel()
			case <-wctx.Done():
			}
		}()
	}
	return s.sup.WaitRunning(wctx, known...)
}

// lastSeen says which program of names was not RUNNING when a wait for
// RUNNING ran out, by one more status read (bounded by ProbeTimeout,
// after ctx ended); waitErr when that read fails or all are RUNNING.
func (s *Supervised) lastSeen(ctx context.Context, names []string, waitErr error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ProbeTimeout)
	defer cancel()
	sts, err := s.sup.Status(rctx)
	if err != nil {
		return waitErr
	}
	for _, n := range names {
		i := slices.IndexFunc(sts, func(st ProgramState) bool { return st.Name == n })
		if i >= 0 && sts[i].State != supervision.Running {
			return fmt.Errorf("%s is %s", n, sts[i].State)
		}
	}
	return waitErr
}

// supervisedHold is Hold over a ProgramHold.
type supervisedHold struct {
	release func() error
	running []string
}

func (h *supervisedHold) Running() []string { return h.running }
func (h *supervisedHold) Release() error    { return h.release() }
