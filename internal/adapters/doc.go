// Package adapters holds the adapters between verbs, for one box's
// configuration (Box): each fills one interface of a verb with another
// verb, and decides nothing. A release change fills upgrade's Runtime,
// Services and Data with the installer, the running supervisor and
// package backup (Box.ChangeOptions for hbx upgrade and rollback,
// Box.SwitchOptions for an install's release change, both holding the
// data through Box.HoldForChange; Box.UpgradeOptions, Box.RecoverUpgrade
// and Box.ChangeWatch for hbx supervise), and the pin the change moves
// (pin.go). A backup or restore gets the supervisor over its socket
// (backup.Services), the data lock, the installer for an archive's
// release and the config file's pin (Box.BackupOptions,
// Box.RestoreOptions, Box.DataOwner, Box.HoldData, LockData;
// Box.RecoverInterruptedRestore is hbx supervise's restore recovery); a
// rollback's restore reactivates a release the runtime directory still
// holds (installer.Reactivate) before it installs one. Box.PruneReleases
// prunes after a release change (internal/prune) and returns the note a
// command prints; Box.PruneReleasesLogged logs it instead, for hbx
// supervise's recoveries and install on start and a command that failed.
//
// The installer adapter marks the failures that mean "could not get the
// image" (network, registry, 404; never a failure to read a --from file,
// which the operator named) with backup.ErrRuntimeUnavailable, which lets
// a restore go on without its runtime (awaiting.go: Awaited, AwaitsImage
// for internal/guardedinstall); OfflineHint adds to an install or upgrade
// that reached no registry how to go on with --from.
//
// The configuration becomes each verb's options in internal/verbopts;
// what composes several verbs in one flow is above this package
// (internal/supervise, internal/guardedinstall), and nothing here calls
// back up into it.
//
// It is one of the composers (internal/boundary's test names them, in
// their order: a composer imports only those below it); no verb package
// and no other shared layer imports it. It prints nothing on its own,
// reads no flags and parses no command line: cmd/hbx does that, builds
// the box with New (giving it the terminal for the passphrase prompt, the
// one hook of the command layer; New fills the other Hooks with the box's
// own, which tests replace) and calls it.
//
// Guarantees: ChangeOptions' and HoldForChange's unlock is never nil and
// is already called when they fail. The adapters decide nothing of a
// change: its steps, crash windows and recovery are upgrade's and
// backup's.
package adapters
