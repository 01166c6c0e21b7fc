// Package supervisorclient is the one place the commands that talk to a
// running supervisor get its client: hbx status, start, stop, restart,
// logs and shutdown (Dial), and hbx health's supervisor check (Programs).
// Each dials the socket of supervisor.socket; when nothing listens there
// but a live `hbx supervise --hold-on-error` holds on its start-up error,
// the error is that *supervisor.HeldError (supervisor.DialHeld).
//
// It is a composer (internal/boundary's list): it joins the supervisor's
// client to the configuration and to package health. It prints nothing.
package supervisorclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/launch"
	"github.com/hermesbox/hbx/supervisor"
)

// ErrorClasses are the classes of the executor's Check errors (a start's
// or restart's preflight) that the supervisor's control socket carries
// (supervisor.Options.ErrorClasses) and that Dial's client maps back to
// the same sentinel (supervisor.Client.Classes): a refusal for a bad env
// or token file, or an invalid configuration, is then exit 2 in hbx as
// when the command itself finds it (cmd/hbx's exit-code table).
var ErrorClasses = []supervisor.ErrorClass{
	{Code: "env_file", Err: launch.ErrEnvFile},
	{Code: "token_file", Err: launch.ErrTokenFile},
	{Code: "config", Err: config.ErrInvalid},
}

// Dial returns the client of the supervisor on cfg's supervisor.socket,
// which maps refusals of ErrorClasses back to their sentinels.
// Its errors wrap supervisor.ErrNotRunning when nothing listens there;
// that error is a *supervisor.HeldError when a live process holds on its
// start-up error for the socket.
func Dial(ctx context.Context, cfg *config.Config) (*supervisor.Client, error) {
	return dial(ctx, cfg.Supervisor.Socket)
}

func dial(ctx context.Context, socket string) (*supervisor.Client, error) {
	c, err := supervisor.DialHeld(ctx, socket)
	if c != nil {
		c.Classes = ErrorClasses
	}
	return c, err
}

// Programs is the supervisor on Socket seen as a health.Supervisor.
type Programs struct{ Socket string }

// Programs dials the supervisor and returns its programs' states. When
// nothing listens on the socket it fails with the start-up error that a
// live `hbx supervise --hold-on-error` holds on (a *supervisor.HeldError),
// else wraps health.ErrNoSupervisor.
func (s Programs) Programs(ctx context.Context) ([]health.Program, error) {
	c, err := dial(ctx, s.Socket)
	if _, held := errors.AsType[*supervisor.HeldError](err); held {
		return nil, err
	}
	if errors.Is(err, supervisor.ErrNotRunning) {
		return nil, fmt.Errorf("%w (nothing listens on %s)", health.ErrNoSupervisor, s.Socket)
	}
	if err != nil {
		return nil, err
	}
	sts, err := c.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("supervisor status: %w", err)
	}
	out := make([]health.Program, len(sts))
	for i, st := range sts {
		out[i] = health.Program{Name: st.Name, State: st.State, PID: st.PID, Detail: st.Detail, Unhealthy: st.Unhealthy}
	}
	return out, nil
}
