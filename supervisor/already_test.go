package supervisor

import (
	"context"
	"testing"
	"time"
)

// TestStartStopSayAlready: a start of a RUNNING program and a stop of a
// STOPPED one do nothing and say so (Result.Already), as supervisorctl's
// "already started"; a start or stop that changes the state does not.
func TestStartStopSayAlready(t *testing.T) {
	s := runSupervisor(t, Options{Programs: []Program{helperProgram(t, progDir(t, "p"), "p", "sleep", "")}})
	waitState(t, s, "p", 30*time.Second, Running)
	ctx := context.Background()
	for _, step := range []struct {
		verb    string
		call    func(context.Context, ...string) ([]Result, error)
		state   State
		already bool
	}{
		{"start", s.Start, Running, true},
		{"stop", s.Stop, Stopped, false},
		{"stop", s.Stop, Stopped, true},
		{"start", s.Start, Running, false},
	} {
		res, err := step.call(ctx, "p")
		if err != nil || len(res) != 1 || res[0].Error != "" || res[0].State != step.state || res[0].Already != step.already {
			t.Fatalf("%s p = %+v, %v; want %s with Already %v", step.verb, res, err, step.state, step.already)
		}
	}
}
