// Package upgrade moves the box to a new pinned Executor release and back
// (`hbx upgrade`, `hbx rollback`) without losing data.
//
// It composes the other verbs through small interfaces that internal/adapters fills
// once (Runtime: the installer; Services: the supervisor and the health
// checks; Data: backup and restore), so it imports none of them. It owns
// the decisions between them: the steps (change.go, rollback.go), the
// release a rollback's restore brings back (Data.Restore, which the
// installer reactivates in place when current or previous holds it:
// installer.Reactivate), the tool set recorded with each release
// (Target.WithTools), and
// the running supervisor's watch for changes whose command died
// (ChangeWatch). That the supervisor went away is package
// internal/supervisorwatch's (ErrSupervisorGone is its ErrGone).
//
// # Upgrade
//
//  1. Take the runtime directory's lock (hbx.lock, the installer's) and
//     finish or undo an interrupted upgrade (Recover).
//  2. Refuse when the target is the active release (ErrSameRelease).
//  3. Stage the new release beside the active one (published under
//     releases/, current untouched) while the services keep running.
//     With Options.Rehearse set (an Upgrade, or a Switch by hbx install),
//     boot it on a copy of the data first (package rehearse): its error
//     refuses the change before anything is stopped or journaled. Then write the journal
//     (phase staged).
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
// while Executor does not run (internal/guardedinstall checked: the supervisor reports it
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
// reactivates the release previous names), then waits for health. A
// rollback of an unfinished change (the upgrade's own after a failure, or
// Recover's) then points previous back at the release it named when the
// change began (Journal.Previous, recorded with phase staged), so the
// failed release, not the older good one, is what the prune removes; no
// previous when there was none or that release is gone (said once). `hbx
// rollback` of a completed change leaves previous at the release it
// rolls back from. A change that ended without completing after a
// completed one (rolled back by itself or by the recovery of its killed
// command, aborted) keeps that one (Journal.Prior, carried across such
// changes; never one `hbx rollback` undid): `hbx rollback` undoes it, as
// it does after a change its rehearsal refused; right after a recovery's
// rollback it refuses instead, naming that change and its archive (it
// may race the supervisor's recovery of the very change the operator
// meant to undo), and so it does after a recovery closed a change
// interrupted before activation (Journal.ClosedNext). The data the release rolled back from ran on is kept aside as <data_dir>.rolled-back-<UTC
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
// Every step is recorded first in <runtime_dir>/upgrade.json (atomicfile),
// and the whole change runs under the runtime directory's lock (hbx.lock,
// a flock the kernel drops when the process dies). Recover reads the
// journal and acts only when no other process holds the lock. It is run
//
//   - by a running `hbx supervise` (ChangeWatch), about every second, once
//     it sees an unfinished journal (Journal.Pending) and no live holder of
//     the lock (LockHolder):
//     the change's command died, so the supervisor resolves it through
//     itself (its programs held, then started and health-checked) and logs
//     what it did and where the data written meanwhile is kept;
//   - by `hbx supervise` before it starts the programs (a reboot);
//   - by Upgrade, Switch and Rollback under their lock, first.
//
// Until it is resolved, `hbx status` exits 3 and `hbx health` fails check
// release, naming the interrupted change and `hbx rollback`; the
// executor's FATAL reason on a release mismatch names it too (never
// "run hbx install", which would put one release's runtime on the other's
// data). After a recovery rolled a change back, `hbx status` notes where
// the data written meanwhile is kept while that copy exists
// (Journal.Recovered, KeptAside).
//
// Recovery undoes an interrupted change rather than finishing it, also
// when the new release happens to be serving healthily: the change was
// never confirmed (its health gate did not complete), the operator's
// command did not report success, and finishing would commit the box to
// one-way data migrations nobody confirmed. Undoing restores the
// pre-upgrade archive the change made for this purpose and keeps the data
// the new runtime wrote in <data_dir>.rolled-back-<time>, named in the
// log, in `hbx status` and in `hbx backup list`, so nothing is lost and
// the upgrade can be run again. The running supervisor notices within
// seconds, so little is written meanwhile, and the result is the same
// whoever notices first (the supervisor, a reboot, hbx rollback).
//
// The windows, by the phase the journal records:
//
//   - no journal yet (staging: pulling, extracting, validating; the
//     rehearsal): a partial release under releases/ or its staging, never
//     current; current, the config and the data are untouched. The next
//     install removes the staging, the next rehearsal its scratch copy
//     and what still runs in it; nothing to recover.
//   - staged, backed-up (the hold, the pre-upgrade backup): current and
//     the config name the old release; the data was only read; maybe a
//     .tmp-* archive (removed by the next backup) or a complete
//     pre-upgrade archive. The hold dies with the process, so the
//     supervisor starts the old release again. Recover closes the journal
//     as aborted (or puts back the journal of a completed upgrade before
//     it, so that one can still be rolled back).
//   - activating, before the config write: as above, but the programs are
//     held stopped until the hold drops with the process. Recover rolls
//     back (pin and data as they were; restoring the pre-upgrade archive
//     over data nothing wrote is harmless).
//   - activating, config written, current not yet moved: the config names
//     the new release, current the old; the supervisor refuses to start
//     Executor on the mismatch (FATAL, naming the interrupted upgrade).
//     Recover rolls back: the old pin, the pre-upgrade data, the old
//     release kept active.
//   - activating, current moved (the health wait): the new release runs on
//     data it may have migrated and written. Recover rolls back: the old
//     pin, the pre-upgrade archive restored with the old runtime, the
//     newer data kept as <data_dir>.rolled-back-<time>.
//   - rolling-back: any point of a rollback (pin, restore, previous).
//     Recover does the rollback again from its start: pinning again is
//     idempotent, the backup package's own journal first undoes a restore
//     killed half-way (its runtime switch included), and restoring the
//     same archive again is harmless. A kill after the restore committed
//     leaves the replaced data as <data_dir>.rolled-back-<time>, listed by
//     `hbx backup list`; the restore done again keeps the data then in
//     place as a newer such copy, and the prune keeps both: a copy
//     stamped since the rollback began (Journal.RollingBackSince, kept
//     across recoveries) is never removed by that rollback.
//   - done, rolled-back, aborted: nothing to do.
//
// # What it does not guarantee
//
// A kill between the config write and the activation (or their reverse in
// a rollback) leaves the config and current naming different releases
// until Recover runs; the supervisor refuses to start Executor on such a
// mismatch, so no runtime ever runs on data of another version. Whether a
// change's process is alive is read from the lock's holder record (its
// pid) and that process's open files (LockHolder, lock.LiveHolder): a pid
// reused by an unrelated process does not count, as it has no hbx.lock
// open (Recover itself takes the flock, so it never runs beside a live
// change). A holder stopped with SIGSTOP keeps the change, and status
// and health say it is stopped; nothing undoes it until it goes on or
// dies. The config file is updated only when it exists on disk; a pin set through
// HBX_* variables or flags is not changed (CheckPinnable refuses to upgrade
// then). Only the last completed upgrade can be rolled back: the journal
// remembers one. Each rollback keeps Options.KeepRolledBack
// <data_dir>.rolled-back-* copies, newest first, never fewer than its own
// (no archive holds that data); older ones are removed and named in the
// result's notes. The rollback's restore moves the replaced data to its
// rolled-back copy in the swap itself (a failure of that move undoes the
// restore, the data stays as it was): no later step can leave it as a
// <data_dir>.pre-restore-<time> copy, which a later restore may prune
// (backup.keep_pre_restore).
//
// It prints nothing and renders nothing: a Result (with what staging
// fetched and reused, Result.Transfer, from Runtime.Stage) is rendered by
// internal/ui (ChangeText, ChangeFields, InstallChangeText,
// InstallChangeFields).
package upgrade
