// Package box maps internal/config onto each verb package's options
// (installer, launch, health, supervisor, backup, upgrade, export) and
// holds the adapters that join one verb to another: the executor's
// supervised program is launch's spec and health's probe
// (SuperviseOptions); a release change fills upgrade's Runtime, Services
// and Data with the installer, the supervisor's services and backup
// (Box.ChangeOptions, Box.UpgradeOptions, Box.SwitchOptions,
// Box.HoldForChange, Box.RecoverUpgrade, Box.ChangeWatch); a backup or
// restore gets the supervisor over its socket, the data lock, the
// installer for an archive's release and the config file's pin
// (Box.BackupOptions, Box.RestoreOptions, Box.DataOwner, Box.HoldData,
// LockData; Box.RecoverInterruptedRestore is hbx supervise's restore
// recovery). It checks check names against what health knows
// (CheckHealthNames) and program users (CheckProgramUsers).
//
// The installer adapter marks the failures that mean "could not get the
// image" (network, registry, 404; never a failure to read a --from file,
// which the operator named) with backup.ErrRuntimeUnavailable, which lets
// a restore go on without its runtime (awaiting.go: Awaited, AwaitsImage
// for internal/guardedinstall); OfflineHint adds to an install or upgrade
// that reached no registry how to go on with --from.
//
// What composes several verbs in one flow is elsewhere, above it:
// hbx supervise's start-up is internal/supervise, an install under
// existing data internal/guardedinstall; below it, the executor's launch
// is internal/executorrun, what a half-done change says to hbx status
// and hbx health internal/pending, the supervisor's client for the
// commands internal/supervisorclient.
//
// It is one of the composers (internal/boundary's test names them, in
// their order: a composer imports only those below it); no verb package
// and no other shared layer imports it. It prints nothing on its own,
// reads no flags and parses no command line: cmd/hbx does that, builds
// the box with New (giving it the terminal for the passphrase prompt, the
// one hook of the command layer; New fills the other Hooks with the box's
// own, which tests replace) and calls it.
//
// Guarantees: the options it returns are the configuration's values (the
// image digest and platform pin of executor.image and
// executor.platform_digests, the enabled programs in config order, the
// environment without HBX_* variables); ChangeOptions' and
// HoldForChange's unlock is never nil and is already called when they
// fail. The adapters decide nothing of a change: its steps, crash windows
// and recovery are upgrade's and backup's.
package box
