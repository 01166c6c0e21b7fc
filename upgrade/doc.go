// Package upgrade moves the box to a new pinned Executor release and back
// (`hbx upgrade`, `hbx rollback`) without losing data.
//
// It composes the other verbs through small interfaces that cmd/hbx
// implements (Runtime: the installer; Services: the supervisor and the
// health checks; Data: backup and restore; Config: the config file), so it
// imports none of them.
//
// # Upgrade
//
//  1. Take the runtime directory's lock (hbx.lock, the installer's) and
//     finish or undo an interrupted upgrade (Recover).
//  2. Refuse when the target is the active release (ErrSameRelease).
//  3. Stage the new release beside the active one (published under
//     releases/, current untouched) while the services keep running.
//  4. Hold the services stopped and take a cold backup of the data
//     (tagged pre-upgrade, recording the old digests). When it fails, the
//     upgrade is aborted: the hold is released, the services are waited
//     for on the old release (HealthWait, not cut short by ctx), and the
//     error names those started again and whether they are healthy; when
//     none were running (hbx install over a stopped Executor) nothing is
//     waited for. An interrupt (ctx cancelled) is named as such: nothing
//     was activated, the old release stays active.
//  5. Pin the new release in the config file, activate it, release the
//     hold, and wait until the services are healthy on it.
//  6. On any failure after step 5 began: roll back (below) and return an
//     error wrapping ErrRolledBack and the cause. From step 5 on, a
//     cancelled ctx (Ctrl-C) cuts nothing short (the waits are bounded):
//     the change ends done or rolled back, never with an open journal
//     under a runtime already writing to the data.
//
// When Services is a Watcher and the supervisor goes away (its connection
// breaks; its programs die with it), the change stops waiting: during the
// hold (step 4) the backup is cancelled and the change abandoned before
// activation, the journal closed, the old release active and configured;
// during the health wait it is rolled back at once, without a supervisor
// (the restore checks that no process holds files in the data directory).
// Either error wraps ErrSupervisorGone and says that nothing runs.
//
// # The MCP tool set pinned with the image
//
// The exact MCP tool set (health.mcp_tools) is a policy pinned with the
// image: Target.MCPTools, when set, is pinned with the new release
// (Release.MCPTools, written by Config.Pin in the same write as the image
// pin) and checked by the health wait; Target.Current, the tool set the
// config file pins now, is recorded with the old release in the journal,
// so a rollback (and Recover) pins it back. Without Target.MCPTools the
// new release keeps Target.Current. A Release whose MCPTools is nil (a
// journal of an earlier version) leaves the file's tool set as it is.
//
// # Switch (hbx install under existing data)
//
// Switch runs the same steps for a release change asked by `hbx install`
// while Executor does not run (cmd/hbx checked: the supervisor reports it
// STOPPED, EXITED or FATAL, or none runs, and the data directory's lock is
// free): stage, cold pre-change backup, journal (By "hbx install"), pin,
// activate. Services may be nil; when set, the programs are held stopped
// across the backup and the activation and not started or health-checked
// afterwards. Rollback undoes it like an upgrade.
//
// # Rollback
//
// Rollback pins the old release in the config file again and restores the
// pre-upgrade archive together with the old runtime (the restore
// reactivates the release previous names), then waits for health. The data
// the new runtime wrote is kept aside as <data_dir>.rolled-back-<UTC
// time> (KeepRolledBack copies, see below). `hbx rollback` does this after a completed
// upgrade; it refuses (ErrNoUpgrade, ErrMismatch) when there is no
// pre-upgrade archive for the release previous names. Its messages say
// what the journal records (which change, by which command, in which
// phase, when) and, when the active release is not the one the journal
// left active, that it was installed without a record.
//
// When the change Rollback finds is an interrupted one, the recovery that
// undoes it (below) is the rollback: Rollback returns a Result with
// Interrupted set and Recovered saying what it did, and no error (`hbx
// rollback` exits 0). After the recorded change was rolled back,
// restoring an older pre-upgrade archive (`hbx restore`, package backup)
// goes back to that archive's release: the restore installs its runtime
// and pins it in the config file with the data.
//
// # Journal and crash windows (kill -9, power loss)
//
// Every step is recorded first in <runtime_dir>/upgrade.json (atomicfile).
// Recover, called by `hbx supervise` before it starts the programs and by
// Upgrade and Rollback under their lock, reads it:
//
//   - staged, backed-up: nothing live changed (current and the config name
//     the old release; the data was only read). The journal is closed as
//     aborted (or, when a completed upgrade preceded this one, its journal
//     is put back, so it can still be rolled back); the staged release is
//     removed by the next install. The
//     hold dies with the process, so the supervisor starts the old
//     release again.
//   - activating: the config or current may name the new release, and the
//     new runtime may have written the data: rolled back as above.
//   - rolling-back: the rollback is done again from its start (restoring
//     the same archive again is harmless; the backup package's own
//     journal undoes a restore killed half-way first, its runtime switch
//     included).
//   - done, rolled-back, aborted: nothing to do.
//
// # Not guaranteed
//
// A kill between the config write and the activation (or their reverse in
// a rollback) leaves the config and current naming different releases
// until Recover runs; the supervisor refuses to start Executor on such a
// mismatch, so no runtime ever runs on data of another version. The
// config file is updated only when it exists on disk; a pin set through
// HBX_* variables or flags is not changed (cmd/hbx refuses to upgrade
// then). Only the last completed upgrade can be rolled back: the journal
// remembers one. Each rollback keeps Options.KeepRolledBack
// <data_dir>.rolled-back-* copies, newest first, never fewer than its own
// (no archive holds that data); older ones are removed and named in the
// result's notes. A rollback killed after its restore
// committed but before the rename leaves the replaced data as
// <data_dir>.pre-restore-<time>, which a later restore may prune
// (backup.keep_pre_restore).
package upgrade
