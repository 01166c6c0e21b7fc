package supervisor

import "github.com/hermesbox/hbx/internal/supervision"

// State is a program's supervisor state; its names and rules live in
// internal/supervision so verbs can read them without importing the
// supervisor.
type State = supervision.State

// The states of a program (see supervision.State).
const (
	Stopped  = supervision.Stopped
	Starting = supervision.Starting
	Running  = supervision.Running
	Backoff  = supervision.Backoff
	Stopping = supervision.Stopping
	Exited   = supervision.Exited
	Fatal    = supervision.Fatal
)
