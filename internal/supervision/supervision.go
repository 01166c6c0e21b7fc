package supervision

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrFatal is wrapped by a wait for RUNNING that ends because a program
// it waits for is FATAL (supervisor.ErrFatal is this error).
var ErrFatal = errors.New("program is FATAL")

// State is a program's supervisor state, named as supervisord names it.
type State int

// The states of a program. Transitions follow supervisord: STOPPED ->
// STARTING -> RUNNING -> EXITED or STOPPING; STARTING -> BACKOFF ->
// STARTING or FATAL; any running state -> STOPPING -> STOPPED.
const (
	Stopped  State = iota // not running; never started or stopped on request
	Starting              // spawned (or about to be) and not yet RUNNING
	Running               // up for startsecs (and healthy, with a Probe)
	Backoff               // a start failed; waiting to retry
	Stopping              // stopsignal sent; waiting for the group to go
	Exited                // exited from RUNNING (expectedly or not)
	Fatal                 // could not be started; given up
)

var stateNames = [...]string{"STOPPED", "STARTING", "RUNNING", "BACKOFF", "STOPPING", "EXITED", "FATAL"}

// String returns the upper-case supervisord name, e.g. "RUNNING".
func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("State(%d)", int(s))
	}
	return stateNames[s]
}

// MarshalText encodes s as its name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes a state name (any case); an unknown name is an
// error naming it.
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range stateNames {
		if strings.EqualFold(n, string(b)) {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("unknown program state %q", b)
}

// HoldRestarts reports whether a hold that finds a program in state s
// starts it again when it is released: STARTING, RUNNING and BACKOFF (the
// program was meant to run), not STOPPED, EXITED or FATAL.
func (s State) HoldRestarts() bool { return s == Starting || s == Running || s == Backoff }

// RunningWaiter waits for RUNNING: WaitRunning returns once every named
// program ("all": every one) is RUNNING at once. It fails at once when one
// is FATAL (ErrFatal) or unknown, or when the supervisor goes away, and with ctx
// otherwise, saying what it last saw. supervisor.Client.WaitRunning is
// the implementation over the control socket.
type RunningWaiter interface {
	WaitRunning(ctx context.Context, names ...string) error
}
