package supervisor

import (
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
