package main

import (
	"errors"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/internal/pending"
	"github.com/hermesbox/hbx/launch"
	"github.com/hermesbox/hbx/supervisor"
)

// Exit codes. exitCodesHelp documents them in `hbx --help`; keep both and
// exitCode in step.
const (
	exitOK      = 0 // success
	exitFailure = 1 // the command failed
	exitUsage   = 2 // invalid configuration or command line
	// exitNotRunning: hbx status showed a program that is not RUNNING
	// (supervisorctl's and LSB's "program is not running"); hbx restore
	// restored the data but left the programs stopped ("done, but not
	// running").
	exitNotRunning = 3
)

// exitCodesHelp is the exit code section of the root command's help.
const exitCodesHelp = `Exit codes:
  0  success
  1  failure: network, registry, disk, digest mismatch, a program that
     would not start, and every other error
  2  invalid configuration (config file, HBX_* environment variables,
     flags, a program's missing user, an env or passphrase file that is
     missing, malformed or readable by others, a path of hbx's that a user
     other than root can replace) or usage (unknown command or flag,
     bad arguments, an unknown program name, an archive or --from path
     that is missing or not a file)
  3  done, but not running: hbx status: a program shown is not RUNNING,
     an upgrade, rollback or restore is half done, or "hbx supervise
     --hold-on-error" holds on its start-up error; hbx restore: the data
     is restored but the programs are NOT started (its runtime awaited)
  "hbx run executor" exits with the payload's own status (128+N when
  signal N ended it).`

// exitCode maps the error run returned to the process exit status: nil to
// exitOK; config.ErrInvalid, launch.ErrEnvFile, launch.ErrTokenFile,
// backup.ErrPassphraseFile, datalock.ErrMountPoint (executor.data_dir is a
// mount point) and usage errors to exitUsage; a
// *supervisor.NotRunningError, *pending.ChangeError or a held start-up
// error (hbx status) or a *notStartedError (hbx restore) to
// exitNotRunning; anything else to exitFailure.
func exitCode(err error) int {
	var ue *cli.UsageError
	var xe *launch.ExitError
	var nr *supervisor.NotRunningError
	var cp *pending.ChangeError
	var hs *heldStatusError
	var ns *notStartedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &xe):
		return xe.Code
	case errors.As(err, &nr), errors.As(err, &cp), errors.As(err, &hs), errors.As(err, &ns):
		return exitNotRunning
	case errors.Is(err, config.ErrInvalid), errors.As(err, &ue),
		errors.Is(err, supervisor.ErrInvalid), errors.Is(err, supervisor.ErrUnknownProgram),
		errors.Is(err, backup.ErrInvalid), errors.Is(err, backup.ErrPassphraseFile),
		errors.Is(err, launch.ErrEnvFile), errors.Is(err, launch.ErrTokenFile),
		errors.Is(err, datalock.ErrMountPoint):
		return exitUsage
	default:
		return exitFailure
	}
}
