// Package supervisorwatch says at once that the supervisor an operation
// talks to went away (killed, crashed, or shut down), so a backup, restore
// or release change stops waiting on a supervisor that cannot answer.
//
// The supervisor's side is one open connection: a Watch keeps a follow of
// the control socket open for the whole operation (Follow) and closes its
// Gone channel when that connection, or an unreleased hold's (WatchHold),
// breaks. The programs a dead supervisor ran died with it
// (PR_SET_PDEATHSIG), so Gone means "nothing runs any more".
//
// The verb packages' side is the Watcher interface: IsGone and Until turn
// any value that implements it into a check and a context cancelled with
// ErrGone as its cause; a value that does not implement it is never gone.
//
// It does not poll, and it does not tell a supervisor that shut down
// cleanly from one that died: both close Gone. A Watch that follows
// nothing (Follow(nil)) never reports the supervisor gone.
package supervisorwatch
