// Package datadir is the one home of the names hbx gives to what it keeps
// beside a data directory (executor.data_dir) and beside each other
// directory a restore replaces (backup.paths): the lock, the restore's
// journal and staging, the pre-restore and rolled-back copies, the
// supervisor's state directory. Every
// package that makes, finds or excludes one of these names reads it from
// here; internal/boundary's test keeps their spellings out of other
// packages' code.
//
// For a directory D = /workspace/executor/data the names are:
//
//	/workspace/executor/.data.lock                       Lock(D): the data lock (internal/datalock)
//	/workspace/executor/.data.lock.owner                 LockOwner(D): its owner lock
//	/workspace/executor/.data.supervisor                 SupervisorState(D): the supervisor's own state
//	/workspace/executor/.data.rehearsal.lock             RehearsalLock(D): held by the running rehearsal
//	/workspace/executor/data.restore.json                Journal(D): an unfinished restore's journal
//	/workspace/executor/data.restore-<stamp>[-N]         Staging: the archive extracted, before the swap
//	/workspace/executor/data.pre-restore-<stamp>[-N]     PreRestore: D as a restore found it
//	/workspace/executor/data.rolled-back-<stamp>         RolledBack: D as a rollback found it
//	/workspace/executor/data.rehearsal-<random>          Rehearsal: a scratch copy an upgrade rehearses on
//
// <stamp> is a UTC time, Stamp's layout (20261201T101500Z): stamps sort
// as text, so the newest copies are the last names in order. -N tells
// apart two restores within one second.
//
// It resolves no symlinks (the callers decide which path names the
// directory: internal/datalock resolves it, a restore resolves each
// target) and does no I/O but in Prune and RemoveTree.
package datadir
