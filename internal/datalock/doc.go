// Package datalock is the single-writer rule of a data directory: whatever
// runs the payload on it (hbx supervise, hbx run executor) or changes it
// with nothing running (hbx backup, hbx restore without a supervisor)
// holds its lock, and a second one refuses, naming the holder.
//
// The lock lives beside the data directory, not in it (a restore swaps the
// directory itself): for /workspace/executor/data it is
// /workspace/executor/.data.lock. Two files make it:
//
//   - .data.lock carries a flock(2) that the payload inherits as an open
//     file descriptor. The kernel keeps the flock for as long as any
//     process holding that descriptor lives, so the lock outlives a
//     supervisor killed with SIGKILL for as long as one process of its
//     payload does, wherever that process was re-parented. Scanning
//     /proc/*/fd for the file finds every such process (Check, Acquire).
//   - .data.lock.owner carries a flock held by the owner alone (hbx
//     supervise, hbx run executor, hbx backup...), never inherited. The
//     owner lock tells a live owner (refuse) from leftovers of a dead one
//     (the data lock is held but no owner lives).
//
// Each file records its holder (pid, command, since) for error messages;
// a process found holding the data lock (a payload process, also one
// whose main thread exited while another thread runs) is named the same
// way, its start read from /proc.
//
// # What it guarantees
//
//   - Acquire refuses with ErrBusy while another owner lives, naming it,
//     before anything is started. With only leftovers of a dead owner
//     holding the data lock it stops them when asked (stop signal, wait,
//     SIGKILL) while holding the owner lock, so no other owner can start a
//     payload meanwhile, and reports each process it stopped; otherwise it
//     refuses naming them.
//   - Check creates nothing, takes no lock and never makes an Acquire fail:
//     it only reads /proc.
//   - Release closes the owner's descriptors without unlocking the shared
//     flock: a payload process that is still alive keeps the data lock.
//   - One directory has one lock whatever path names it: Path resolves
//     symlinks, and Acquire refuses (ErrMountPoint) a data directory that
//     is the root of a mount, the one way to reach it under another parent
//     (a bind mount), and checks that the directory beside the lock is the
//     data directory by device and inode.
//
// # What it does not guarantee
//
//   - It cannot see processes whose /proc/PID/fd this user may not read
//     (other users' processes when hbx is not root); such a holder is
//     named "an unknown process".
//   - A payload process that closes its inherited descriptor is no longer
//     counted (Executor's Bun does not).
//   - flock(2) on NFS is emulated with POSIX locks by the client; keep the
//     data directory's parent on a local file system.
package datalock
