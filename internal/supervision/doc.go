// Package supervision is the supervisor's vocabulary, small enough for
// any verb to import (the verb package supervisor is imported only by
// cmd/): the states a supervised program is in (State, named as
// supervisord names them), which of them a released hold starts again
// (State.HoldRestarts), and the wait for RUNNING (RunningWaiter, which
// supervisor.Client implements over the control socket).
//
// It holds names and rules only: no I/O, no process handling. The
// transitions themselves, the holds and the wait are the supervisor's
// (docs/supervise.md).
package supervision
