// Package programname checks the program names a command is given against
// the programs the running supervisor has (Check, CheckSupervised), said as
// helpfully as the configuration allows: a program the configuration
// disables is named as such, any other unknown name gets the supervisor's
// programs and a "did you mean". hbx status, start, stop, restart and logs
// check their names here before they act; every refusal wraps
// supervisor.ErrUnknownProgram (exit 2).
package programname
