// Package cli holds the command-line rules every hbx command shares, so
// cmd/hbx is left with its commands' wiring: what a usage error is (exit
// 2), how a command checks its positional arguments and says what it
// wants, the "did you mean" of an unknown command or flag, and the logger
// --log-level builds. It knows cobra and pflag, and nothing of hbx's
// verbs.
package cli
