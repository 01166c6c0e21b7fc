// Package rehearse boots a staged (published, not current) release on a
// copy of the box's data before `hbx upgrade` touches the box, and says
// whether it would come up: a release that crashes or never becomes ready
// on a copy of the real data is refused (ErrRefused) while the running
// release keeps serving. docs/upgrade.md#rehearsal says it for operators.
//
// Run does, in order:
//
//  0. Refuse, before anything is removed, made or copied, a payload
//     environment whose EXECUTOR_DATA_DIR (the env file's, the last one)
//     names another directory than the data directory (step 4's
//     refusal, found early).
//  1. Take the rehearsal lock (datadir.RehearsalLock, held until the
//     scratch directory is gone; held by another copy of hbx, the
//     rehearsal is refused naming it, and nothing of that copy's is
//     touched). Remove what an earlier rehearsal left (its process killed by a
//     kill -9 of hbx): every <data_dir>.rehearsal-* directory that holds
//     the held file hbx made (regular, its own, one name), after
//     SIGKILLing every process that still holds it open and every member
//     of the cgroup it records (CgroupRecord, hbx's own file too; the
//     cgroup is removed). One without it
//     (another box's data directory so named, a held file replaced by a
//     link) is left alone, logged, and kills nobody; an empty one (a
//     removal killed after the held file) is removed.
//  2. Make a private scratch directory beside the data directory,
//     <data_dir>.rehearsal-<random> (internal/datadir's Rehearsal kind):
//     created exclusively, mode 0700, root's (the caller's) while it is
//     filled, then the data directory's owner's. It is as trusted as
//     the data directory, whose parent it shares.
//  3. Copy the data into it without stopping anything (Snapshot), once
//     it is known to fit: a copy that would leave less than MinFree free
//     on the filesystem it shares with the live data is refused before
//     anything is copied (ErrNoSpace; a sparse file counts at its size,
//     the copy writes its holes out). Copy
//     every file, then read the data again; when every file read the same
//     both times, the copy is the data as it stood at one instant between
//     the two passes, a state SQLite recovers from as from a crash of its
//     writer (its WAL is replayed; the -shm index is not copied, SQLite
//     rebuilds it). When the data changed during the copy, it tries again
//     (Attempts in all); when it never holds still and Options.Hold is set,
//     it copies once while Hold keeps the programs stopped and reports how
//     long that hold lasted (Result.Held).
//  4. Start the release from the copy exactly as the real start does
//     (launch.PrepareCommand with the image's own command: the same user,
//     environment, env file, key and argument mapping), on a free loopback
//     port the OS chose (never the configured one), with its own state
//     directory in the scratch directory. A value of its environment
//     (the env file's) naming the live data or state directory, or a path
//     inside one, names the same path in the copy; an EXECUTOR_DATA_DIR
//     naming another directory refuses the rehearsal (step 0). EXECUTOR_HOST and
//     PORT are the rehearsal's whatever the env file sets (it comes after
//     hbx's settings: PORT=<executor.port> there is the real start's own
//     value, and would have the rehearsal meet the running payload's
//     port).
//  5. Wait, bounded by Options.Wait, for the readiness gate of the real
//     start (health.ReadyProcess: the readiness check, then every
//     listener of its process tree on loopback), then run Options.Checks
//     once (the MCP checks the real start's health wait runs: the 401
//     Bearer challenge, the tool set pinned with the release). A payload
//     that exits, never becomes ready or fails a check is refused: the
//     error names what failed and quotes the last TailLines lines of its
//     output (each cut to TailLineMax bytes, control characters written
//     as \xNN).
//  6. Stop it whatever happened: SIGTERM to its process group, SIGKILL
//     to the group after StopGrace, then SIGKILL to every process that
//     still holds launch's marker or the scratch's held file, found by
//     the descriptor hbx holds on it, never by its name (a child
//     that left the group: workerd, a setsid daemon); then remove the
//     scratch directory. With Options.Cgroups, where a cgroup v2
//     hierarchy is writable, the payload runs in a cgroup of its own
//     (cgroup.go: <hbx's own cgroup>/hbx.<id>/rehearsal, recorded in the
//     scratch directory before it is made), and every member of it gets
//     the SIGTERM and, after StopGrace, SIGKILL, each signalled only
//     once cgroup.procs and its pidfd prove it a member; the cgroup is
//     removed before the scratch directory. Where none is writable, one
//     log line says so.
//
// # What it guarantees
//
//   - The running box is never stopped, unless the data never holds still
//     over Attempts copies and Options.Hold is set: then the hold lasts
//     the one copy (milliseconds for Executor's few files).
//   - The live data directory is only read; the live port, state
//     directory and data lock are never used. A link in the data that
//     names the live data directory by absolute path names the copy in
//     the copy (a relative one resolves inside the copy as it is).
//   - The scratch directory is removed when Run returns, and by the next
//     Run when hbx was killed (with what still runs in it), wherever the
//     kill stopped it, its removal included: data/ and state/ go first,
//     the cgroup record next, the held file last, then the empty
//     directory.
//   - A scratch directory a running rehearsal (another copy of hbx)
//     holds is never removed, nor its processes signalled: it holds the
//     rehearsal lock.
//
// # What it does not guarantee
//
//   - Without a writable cgroup (or Options.Cgroups), a process of the
//     rehearsal that left its process group and closed every descriptor
//     it inherited is not found. With one, a process root moves out of
//     the cgroup is not either; and the payload, whose the scratch
//     directory is, can delete its CgroupRecord: a later rehearsal in
//     another cgroup than a killed one then misses that cgroup.
//   - A release that passes can still fail on the real start (data
//     written between the copy and the stop); the upgrade's own health
//     wait and rollback remain the safety net.
//   - The copy's consistency rests on no file of the data returning to the
//     exact bytes it had within the copy window (an ABA): SQLite's WAL
//     salts change at every reset, so its files never do.
//
// It prints nothing: it logs to Options.Logger and returns a Result.
package rehearse
