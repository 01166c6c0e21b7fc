package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Table renders list as supervisorctl status does: one line per program,
// its name padded to the longest name (at least 8 columns), its state
// padded to 8 and its detail, each line ending in "\n".
func Table(list []Status) string {
	width := 8
	for _, s := range list {
		width = max(width, len(s.Name))
	}
	var b strings.Builder
	for _, s := range list {
		fmt.Fprintf(&b, "%-*s  %-8s  %s\n", width, s.Name, s.State, s.Detail)
	}
	return b.String()
}

// NotRunning returns a *NotRunningError naming the programs of list that
// are not RUNNING, or nil when every one is.
func NotRunning(list []Status) error {
	var bad []string
	for _, s := range list {
		if s.State != Running {
			bad = append(bad, fmt.Sprintf("%s (%s)", s.Name, s.State))
		}
	}
	if bad == nil {
		return nil
	}
	return &NotRunningError{bad}
}

// NotRunningError says which programs of a status list are not RUNNING
// (hbx status exits 3 for it, as supervisorctl does).
type NotRunningError struct {
	Programs []string // "name (STATE)", in the list's order
}

// Error lists the programs: "not running: hermes (FATAL), worker (BACKOFF)".
func (e *NotRunningError) Error() string {
	return "not running: " + strings.Join(e.Programs, ", ")
}

// ErrSomeFailed is wrapped by ControlText's error: at least one program
// did not reach the state a start, stop or restart wanted.
var ErrSomeFailed = errors.New("some programs failed")

// Control starts, stops or restarts names (verb "start", "stop" or
// "restart") and returns the supervisor's result per program. Another
// verb is an error wrapping ErrInvalid.
func (c *Client) Control(ctx context.Context, verb string, names ...string) ([]Result, error) {
	switch verb {
	case "start":
		return c.Start(ctx, names...)
	case "stop":
		return c.Stop(ctx, names...)
	case "restart":
		return c.Restart(ctx, names...)
	}
	return nil, fmt.Errorf("%w: control verb %q (want start, stop or restart)", ErrInvalid, verb)
}

// ControlText renders the results of verb (see Control) as supervisorctl
// does, one line per program, "name: started", "name: already RUNNING"
// (or STOPPED: Result.Already, nothing done), "name: ERROR (STATE:
// why)", or for a program its Check refused "name: ERROR (restart name:
// why; nothing stopped)"; the error, when a program failed, wraps
// ErrSomeFailed (and ErrRefused when one was refused) and counts them:
// "some programs failed: 1 of 2 not started (see above)".
func ControlText(verb string, res []Result) (string, error) {
	done := map[string]string{"start": "started", "stop": "stopped", "restart": "restarted"}[verb]
	var b strings.Builder
	failed, refused := 0, false
	for _, r := range res {
		switch {
		case r.Refused:
			failed, refused = failed+1, true
			fmt.Fprintf(&b, "%s: ERROR (%s)\n", r.Name, r.Error)
		case r.Error != "":
			failed++
			fmt.Fprintf(&b, "%s: ERROR (%s: %s)\n", r.Name, r.State, r.Error)
		case r.Already:
			fmt.Fprintf(&b, "%s: already %s\n", r.Name, r.State)
		default:
			fmt.Fprintf(&b, "%s: %s\n", r.Name, done)
		}
	}
	if failed == 0 {
		return b.String(), nil
	}
	err := fmt.Errorf("%w: %d of %d not %s (see above)", ErrSomeFailed, failed, len(res), done)
	if refused {
		err = &remoteError{msg: err.Error(), is: []error{ErrSomeFailed, ErrRefused}}
	}
	return b.String(), err
}

// ControlText is ControlText's, with its error also matching the Err of
// each of c.Classes a refused program's Class names (a refused restart
// for a bad env file is then launch.ErrEnvFile to the caller, as the
// refusal of a single program is).
func (c *Client) ControlText(verb string, res []Result) (string, error) {
	text, err := ControlText(verb, res)
	re, ok := err.(*remoteError)
	if !ok {
		return text, err
	}
	for _, r := range res {
		if ce := classErr(c.Classes, r.Class); r.Refused && ce != nil && !errors.Is(re, ce) {
			re.is = append(re.is, ce)
		}
	}
	return text, re
}
