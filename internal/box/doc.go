// Package box composes the box from its configuration: it maps
// internal/config onto each verb package's options (installer, launch,
// health, supervisor, upgrade) and holds the adapters that join one verb
// to another: the executor's supervised program is launch's spec and
// health's probe (superviseOptions); a release change fills upgrade's
// Runtime, Services and Data with the installer, the supervisor's
// services and backup (Box.ChangeOptions, Box.UpgradeOptions,
// Box.recoverUpgrade, Box.ChangeWatch); an install that would change the
// active release under existing data goes through upgrade.Switch
// (Box.GuardedInstall, as installer.Guard decides); the journals of
// upgrade and backup decide what `hbx run executor` and hbx supervise say
// while a change is half done (prepareLaunch; what `hbx status` and `hbx
// health` say is internal/pending's); it runs the executor in the foreground
// (RunExecutor) and the supervisor's start-up as named steps
// (Box.Supervise: programs checked, data lock, the supervisor's own
// locks, recovery, change watch, run), and checks check names against
// what health knows (CheckHealthNames; program names are
// internal/programname's). The backup side is here too: Box.BackupOptions,
// Box.RestoreOptions, Box.DataOwner and Box.HoldData give cmd/hbx what it
// composes `hbx backup`, `hbx restore` and `hbx backup verify` from: the
// supervisor's services over its socket (dialServices), the data
// lock (LockData; without a supervisor, a backup or restore takes it),
// the installer for an archive's release and the config file's pin;
// Box.ChangeOptions is what `hbx upgrade` and `hbx rollback` call
// package upgrade with. Box.RecoverInterruptedRestore
// is hbx supervise's restore recovery. The installer adapter marks the
// failures that mean "could not get the image" (network, registry, 404;
// never a failure to read a --from file, which the operator named) with
// backup.ErrRuntimeUnavailable, which lets a restore go on without its
// runtime; data restored that way (backup.AwaitedRuntime) stops hbx
// supervise, the executor's launch, hbx install of another release, hbx
// upgrade and rollback, and shows in hbx status (exit 3, with or without
// a supervisor: internal/pending) and hbx health, until its release is
// active (hbx install of it is a plain install; its failure names the
// image). OfflineHint adds to an install or upgrade that reached no
// registry how to go on with --from. `hbx export` is package
// internal/export's; the box maps its options (ExportOptions, KeptDirs).
//
// It is one of the composers, the packages besides cmd/ and e2e/ allowed
// to import verb packages (internal/boundary's test names them); no verb
// package and no other shared layer imports it. It prints nothing on its
// own, reads no flags and parses no command line: cmd/hbx does that, builds
// the box with New (giving it the terminal for the passphrase prompt, the
// one hook of the command layer; New fills the other Hooks with the box's
// own, which tests replace) and calls it.
//
// Guarantees: the options it returns are the configuration's values (the
// image digest and platform pin of executor.image and
// executor.platform_digests, the enabled programs in config order, the
// environment without HBX_* variables); prepareLaunch reads the journals and change nothing on disk; ChangeOptions' unlock is
// never nil and is already called when it fails. The adapters decide
// nothing of a change: its steps, crash windows and recovery are
// upgrade's and backup's.
package box
