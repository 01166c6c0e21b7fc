// Package backup makes cold, encrypted, verified backups of Executor's data
// directory and restores them atomically (`hbx backup`, `hbx restore`).
//
// # Archive format
//
// An archive is a PAX tar stream, compressed with gzip (parallel, pgzip;
// the default) or zstd, encrypted with OpenPGP: a v4 Symmetric-Key
// Encrypted Session Key packet (AES-256, iterated and salted SHA-256 S2K
// at the largest count) and a v1 Symmetrically Encrypted Integrity
// Protected Data packet (MDC), which Debian's gpg 2.2 and every later gpg
// decrypt with the passphrase. Files are named
// <name>-<UTC YYYYMMDDThhmmssZ>.tar.gz.gpg (.tar.zst.gpg; .tar.gz without
// encryption), mode 0600, with <archive>.sha256 (sha256sum's format) and
// <archive>.json (a summary for `hbx backup list`) beside them.
//
// The tar's first entry is the manifest, hbx-backup.json (Manifest): format,
// creation time, hbx version, the configured image reference, its index
// digest, platform and child manifest digest, and every following entry
// with its path, type, mode, size and sha256 (regular files) or link. The
// data directory is the archive's root ("./", "./db/x"), as
// `tar -czf - -C DATA .` names it; extra paths follow under .hbx-paths/.
// Entries keep modes, numeric owners, mtimes to the nanosecond, symlinks
// (verbatim), hardlinks, empty directories and extended attributes
// (SCHILY.xattr.* records). Sockets, fifos and devices are left out:
// Result.Skipped and the manifest's "skipped" list them, and Restore and
// Verify report them (a manifest whose skipped entry has another type or
// an unclean path is refused as damaged).
//
// Names are bytes. Paths and symlink targets go into the tar as the
// filesystem gives them (PAX records); in the manifest one that is not
// valid UTF-8 is written as "path_b64" ("link_b64"), standard base64 of
// the bytes, instead of "path" ("link"); so are the data directory and
// the extra paths ("data_dir_b64", "paths_b64"), which restore puts the
// extra paths back to. Manifests with plain "path" entries (all earlier
// ones) read as before.
//
// # Passphrases
//
// ReadPassphraseFile reads a passphrase file exactly as `gpg
// --passphrase-file` does: the first line up to "\n" or the end of the
// file, nothing stripped (a CRLF file's "\r", leading and trailing blanks
// belong to the passphrase), and, as in gpg, only the bytes before a NUL
// byte key the encryption; a file that is missing, not regular, readable
// or writable by group or others, or starts with an empty line or a NUL
// is refused with ErrPassphraseFile. When the passphrase does not decrypt
// an archive, the forms earlier hbx versions used are tried once each
// (the whole line, NUL included; the line without a trailing "\r") and a
// note says which worked. A passphrase that does not
// decrypt is reported as ErrCorrupt when the archive's bytes differ from
// its .sha256 file and the sha256 in its .json file (those present and
// well-formed), ErrWrongPassphrase when they match either, and
// ErrUndecryptable ("wrong passphrase or damaged archive") without both.
//
// Reading accepts that format, GnuPG 2.4's (a v5 SKESK with an OCB AEAD
// Encrypted Data packet), RFC 9580's (SEIPD v2), ASCII armor, gzip, zstd or
// no compression, and archives without a manifest (made by
// `tar -czf - -C DATA . | gpg --symmetric`); it refuses OpenPGP messages
// without integrity protection or without encryption (ErrNotProtected).
//
// # What Create guarantees
//
//   - It holds the runtime directory's lock (LockFile, the installer's)
//     throughout; a second backup, restore or install waits for it
//     (Options.LockWait) or fails naming the holder (lock.HeldError).
//   - The archive is cold: the supervised programs are stopped (a hold on
//     the supervisor's socket, released when this process exits, even by
//     SIGKILL) and no other process may hold a file in the archived
//     directories (checked through /proc, ErrBusy); every file is hashed,
//     then archived, and a file that changed in between fails the backup.
//     The programs are started again as soon as the archive is durable,
//     and Create waits (Options.HealthWait) until those it stopped are
//     RUNNING and healthy (Services.WaitRunning).
//   - Every failure after the programs were stopped (no space, a file
//     that changed, the read-back check) removes the partial or
//     unverified archive, starts the programs again, waits for them as
//     above and names them in the error. When they are not running again
//     (the supervisor died, a program is FATAL, the wait ran out), the
//     error wraps ErrNotRestarted and names them; if the archive was
//     complete and verified it is kept and the Result returned too.
//   - The archive is written to a temporary file in the destination
//     (atomicfile: fsync, rename, fsync of the directory), so no partial
//     archive ever has an archive's name; then its pages are dropped from
//     the page cache and it is read back from disk and checked entry by
//     entry against its manifest. A failed check removes it.
//   - An interrupted restore is recovered first, under the hold (see
//     Recover); when that puts back a config pin or a runtime, the
//     programs that should run are started too (Services.WaitHealthy),
//     since a supervisor refuses Executor on the mismatch meanwhile.
//   - The runtime directory, executor.state_dir, the backup directory and
//     what restores leave beside the data directory are never archived,
//     even inside an extra path (compared by device and inode).
//
// # What an archive may plant
//
// Extended attributes (untrusted.go, keepXattr): user.* always; POSIX
// ACLs (system.posix_acl_access/_default) from an authenticated archive
// only; security.* (file capabilities, which would make a program the
// Executor user runs privileged however its owner was remapped; SELinux
// and other labels, which the host's policy sets) and trusted.* never,
// like setuid bits. RestoreResult.Notes and the log name what was
// dropped.
//
// Symlinks of an archive that is not authenticated: an absolute target
// or one whose ".." climb lexically out is refused as the entry is read
// (leavesRoot). That is not enough: a ".." after a symlink component
// resolves from where that symlink points (a/top -> ../.., then
// esc -> a/top/../etc/shadow is lexically inside). So once the tree is
// staged, and before it is given its owner, every symlink of it is
// resolved by the kernel beneath the staging root (checkSymlinksBeneath:
// openat2 RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS): EXDEV (out) and ELOOP
// (a loop) refuse the archive, nothing changed; ENOENT (a symlink to
// nothing) is fine. This is checked on the result rather than on the
// targets' text so that no spelling escapes it; refusing every ".."
// instead would refuse ordinary trees (node_modules/.bin links), and is
// only the fallback on kernels without openat2. The walk never follows
// a symlink and the kernel keeps each resolution beneath the root, so a
// tree changed under the check cannot make it look outside; a symlink the
// Executor user adds meanwhile is one it could add to its data directory
// anyway. Authenticated archives are the box's own and keep their
// symlinks as they were.
//
// # What Restore guarantees
//
//   - Nothing live changes until the whole archive has been decrypted,
//     decompressed, checked (integrity, manifest, names) and extracted into
//     <dir>.restore-<ts>, beside each restored directory (same filesystem),
//     with package extract (chroot-like resolution, no entry outside the
//     root; Literal: ".wh." names are data; Xattrs). Entries beneath a
//     symlink, names with "..", absolute names, duplicates, hardlinks to
//     anything but an earlier file and devices are refused; a fifo in an
//     archive without a manifest (GNU tar archives them) is left out and
//     listed in RestoreResult.Notes.
//   - Which release and what else an archive may change is decided first
//     (PlanRestore), shared with `hbx backup verify`: only a release of
//     an allowed repository (RestoreOptions.AllowedRepository: executor.image's
//     and its mirrors) or the configured one; an archive that is not
//     authenticated (not decrypted with RestoreOptions.Passphrase) keeps
//     the configured release unless RestoreOptions.AcceptImage names its
//     image, restores no extra path, plants no symlink leading out of the
//     data directory, and every entry of it gets Owner. An archive naming
//     the configured index digest is acted on under the configured name
//     (install, pin, awaited runtime, hints), and one naming it under a
//     repository that is not allowed is refused: the name is where root
//     connects to. A manifest whose image, index digest or
//     platform contradict each other, one larger than MaxManifestBytes
//     (Create refuses to write one) and names longer than 4096 bytes are
//     refused as damaged (ErrCorrupt), before anything changes.
//   - An archive whose manifest names another release than the
//     configuration (RestoreOptions.Config) is restored with that release:
//     its runtime and its pin in the config file change with the data.
//     When the pin cannot take effect (no config file, an HBX_* variable
//     or a flag sets it: Config.CanPin), the restore is refused before
//     anything changes (ErrInvalid).
//   - Then the programs are stopped, the journal records the active
//     release and the config file's pin, the archive's runtime is
//     installed if it is not the active one (a failure changes nothing,
//     and the programs are started again and waited for as after a
//     backup, the error naming them), and each
//     staged directory is exchanged with the live one by one
//     renameat2(RENAME_EXCHANGE): at every instant the path holds either
//     the whole old tree or the whole new one. A directory that is itself
//     a mount point (a container volume) cannot be swapped: the restore
//     is refused before anything changes (ErrInvalid); a volume must hold
//     its parent. The old tree is kept as
//     <dir>.pre-restore-<ts> (RestoreOptions.KeepPreRestore copies; this
//     restore's own is never the one pruned while any is kept, whatever
//     the clock says), or, for the data directory of a rollback's restore
//     (RestoreOptions.KeepAs), as <data_dir>.rolled-back-<ts>, moved there
//     by the swap itself (a failure undoes the restore) and never pruned
//     by a restore. ListKept lists both kinds (KindPreRestore,
//     KindRolledBack), with their file counts and bytes.
//     Last, the archive's release is pinned in the config file: until
//     then the config names the release before, so a supervisor that
//     starts Executor in between (the hold died with a killed restore)
//     refuses the mismatch instead of running a runtime on data of
//     another release.
//   - The programs are started and must become healthy (Services.WaitHealthy)
//     within HealthWait; otherwise the pin before is written back, the
//     old trees are exchanged back, the runtime before is activated again
//     (in that order, the reverse of the restore's), and the programs are
//     started again (ErrUnhealthy). From the swap on, a cancelled ctx
//     does not cut the health wait or the undo short (both bounded): the
//     restore ends committed or undone, never half-way with programs
//     writing to data a later Recover would swap out.
//   - When Services is a Watcher and the supervisor goes away (ErrSupervisorGone):
//     Create stops scanning or writing and removes the partial archive
//     (the data is no longer kept cold), unless the archive is already
//     durable; neither Create nor Restore waits for programs that died with
//     the supervisor. Restore stops before the swap (undoing a runtime it
//     installed), or, during the health wait, puts the old data (and
//     runtime) back without a supervisor once no process holds files in
//     the restored directories (a dying program gets a few seconds); when
//     one still does, the journal is left for the next hbx supervise and
//     the error says so.
//   - Restore without a runtime: when installing the archive's runtime
//     (a plain archive's: the configured RestoreOptions.Image, which its
//     data then waits for) fails with ErrRuntimeUnavailable (the image could not be had: no
//     network, the registry down or without it; the Runtime decides,
//     internal/adapters from the installer's error, and never for an install
//     from a file the operator named, hbx restore --from) and no
//     release is active, or RestoreOptions.WithoutRuntime is set, the
//     restore goes on: swap, pin (the archive's image and, for the
//     configured platform, its manifest digest, so a plain hbx install
//     installs that runtime), then the journal's phase "not-started"
//     ("restored, not started", with the archive's image, index and
//     manifest digests), the hold released and nothing started or
//     health-checked (RestoreResult.WithoutRuntime). Automatic without an
//     active release because nothing ran on the data and the operator
//     asked for it; a flag with one, because stopping running programs
//     until the registry is back is the worse outcome of a network blip.
//     Any other install failure (a digest mismatch, a bad configuration)
//     undoes the restore as before. Recover never undoes such a restore:
//     it finishes it (old copies pruned, journal removed) once the
//     archive's release is active, installing it first with
//     RecoverOptions.InstallAwaited (only when it is the release the
//     config file pins: a journal edited to name another image or
//     manifest installs nothing and fails), and leaves it otherwise;
//     AwaitedRuntime (an *AwaitedError naming the image) is what the
//     commands that would start or change a release on that data check
//     (internal/supervise, internal/executorrun, internal/guardedinstall: hbx supervise, the executor's launch, hbx install of
//     another release, hbx upgrade, hbx rollback, hbx status). A kill
//     before the journal says "not-started" leaves an ordinary
//     unconfirmed restore, undone by the next recovery. A restore begun
//     over one "not started" keeps that journal in its own (Prior): if it
//     does not take effect (refused before the swap, undone, or
//     interrupted and undone by a recovery) that journal is written back,
//     so the data put back still waits for its runtime; once it takes
//     effect (confirmed, or itself not started) it replaces it.
//   - Every step is recorded first in a journal, <data_dir>.restore.json
//     (internal/journal: written durably, "format" 1 checked on read; a
//     journal of another format is refused, journal.ErrFormat). Recover, called by `hbx supervise` before it starts
//     programs and by Create and Restore under their lock, undoes an
//     interrupted restore that was not confirmed healthy (the same undo,
//     each step done only when needed, then the staging removed) and
//     finishes a confirmed one. It returns what it did in words: which of
//     the pin, the data and the runtime it put back, or "nothing had
//     changed" only when none was.
//
// # Crash windows (kill -9, power loss)
//
// Who recovers: a running `hbx supervise` notices within about a second
// that a restore journal is left and no live process holds the lock (the
// kernel dropped the killed command's flock) and runs Recover through
// itself (cmd/hbx); else the next `hbx supervise`, backup, restore,
// upgrade or rollback does, first. Until then `hbx status` and `hbx
// health` (check release) fail naming the restore, and a supervisor that
// refuses Executor on a release mismatch names the journal and the
// commands that undo it, not `hbx install` (which follows the pin, not
// the data).
//
//   - backup, before the rename: a .tmp-* file in the backup directory,
//     removed by the next backup; no archive. The supervisor restarts the
//     programs when the hold's connection drops.
//   - backup, after the rename: a complete archive; if the .sha256/.json
//     files or the check are missing, `hbx backup verify` checks it.
//   - restore, staging: <dir>.restore-<ts> and the journal; the data is
//     untouched; Recover removes them.
//   - restore, release change recorded, before or after the rename of the
//     runtime's current link (installer): the data is untouched; if the
//     runtime was switched, the supervisor refuses to start Executor (the
//     config still names the release before) until Recover activates that
//     release again and removes the staging.
//   - restore, swapped, before the pin: the directory holds the complete
//     new tree, the runtime may be the archive's, the config names the
//     release before (Executor refused); Recover puts the old tree and
//     the runtime back.
//   - restore, swapped, not confirmed (pinned, or no release change): the
//     directory holds the complete new tree and runtime, pin and data
//     agree (the supervisor restarts the programs on it when the hold
//     drops, and undoes it within seconds); Recover writes the pin before
//     back, puts the complete old tree back, then the runtime before.
//   - restore, confirmed: Recover prunes old copies and removes the journal.
//   - restore, not started (no runtime): the directory holds the complete
//     new tree, the config pins the archive's release, which is not
//     active; nothing starts on it; Recover leaves it until that release
//     is active, then finishes it as a confirmed one.
//   - any unconfirmed window, recovered without a Runtime
//     (RecoverOptions.Runtime nil) while the journal records a release
//     change: the pin and the data are put back, the journal is kept and
//     the error wraps ErrRestoreHalfDone, naming the journal and the
//     commands (hbx backup, hbx supervise) whose recovery switches the
//     runtime back too.
//   - Recover itself killed: each undo step is idempotent and the journal
//     is removed last, so the next Recover does the rest.
//
// Steps and their windows: Create is checkCreate, prepareDir and estimate
// (nothing written), stopServices, then archiveHeld: recoverLocked,
// scanHeld, writeArchive ("before the rename", then "after"), the
// restart, checkWritten; every path out of archiveHeld restarts the
// programs (failHeld or the restart that follows). Restore
// (restoreRun) is newRestoreRun, recoverLocked, openAndPlan (nothing
// changed), writeStagingJournal and stageArchive ("staging"),
// stopServices, activateRuntime ("release change recorded"), swapIn
// ("swapped, before the pin"), pin ("swapped, not confirmed"),
// startAndCheck, commit ("confirmed"), or, without the runtime
// (mayGoWithout, goWithout), leaveStopped ("not started"). recoverLocked picks removeStaged,
// undoInterrupted, finishCommitted or resumeNotStarted by the journal's
// phase.
//
// # Who owns what
//
// This package owns the decisions around a backup or restore; the
// composer only fills options and cmd/hbx prints. Supervised is Services over a running
// supervisor (the composer adapts supervisor.Client to Supervisor): which
// programs a hold stops (those STARTING, RUNNING or in BACKOFF just
// before it), starting the autostart ones the hold did not stop, and the
// wait until they are RUNNING and the readiness probe passes (failing at
// once on FATAL or a supervisor gone). The package never reads the
// configuration: the composer (internal/verbopts) maps it onto Options and
// RestoreOptions, and Config (internal/pinfile.File) pins a restored
// release in the config file; ListKinds lists
// backups and pre-upgrade archives together. The read-ahead of decrypted
// data is internal/readahead's, shared with the installer.
//
// # What it does not guarantee
//
// It does not make the box consistent with anything outside the archived
// directories. Without a supervisor it starts nothing and checks no
// health; the /proc check cannot see processes of other users when hbx is
// not root. Extra paths are exchanged one after the other: across several
// directories a crash can leave some restored and some not, which Recover
// undoes. An extra path that contains the runtime, state, data or backup
// directory is archived (without them) but restored only by hand
// (RestoreOptions.DataOnly restores the data directory alone). setuid and
// setgid bits are dropped on restore, as package extract does. Undoing an
// unconfirmed restore removes the restored tree, and with it whatever the
// programs wrote to it after the swap (a running supervisor undoes it
// within seconds, so little can be); it is not kept aside.
package backup
