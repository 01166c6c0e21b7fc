// Package procscan finds processes through /proc by the files they hold
// open, and stops them. hbx marks every process it starts with an
// inherited file descriptor (a lock or marker file); the marker survives
// setsid, double forks and the death of the process that started them, so
// scanning /proc/*/fd for the marker's device and inode finds every
// descendant that still lives, wherever it was re-parented.
//
// # What it guarantees
//
//   - Openers lists every process whose fd table this user may read and
//     that has the file open, compared by device and inode (a renamed or
//     deleted file is still found). A process whose main thread exited
//     while another thread runs is one of them: its /proc/PID/fd lists
//     nothing, so the file tables of its threads are read, each through
//     /proc/PID/task/TID (never /proc/TID, which a reused id could name),
//     and it is listed once. Stop counts it as running (Running) and
//     signals it.
//   - Every scan goes through a Pin, an open descriptor on the file held
//     for the whole scan: the inode cannot be freed and given to another
//     file meanwhile, so a process that opened a later file with the same
//     inode number is never listed or signalled.
//   - Stop sends a signal, waits, then sends SIGKILL, and returns only when
//     every listed process is gone or the kill deadline passed.
//
// # What it does not guarantee
//
//   - Processes of other users are invisible to a non-root caller (their
//     /proc/PID/fd cannot be read): run hbx as root to see them.
//   - A process that closed the inherited descriptor is not found, nor
//     one whose descriptor is only in the file table of a thread that
//     unshared it (unshare(CLONE_FILES)) while the main thread lives:
//     the threads' tables are read only when /proc/PID/fd lists nothing.
//   - A listed process's command and start (Process.Command, Since) are
//     read just after its descriptors: a pid reused in that window is
//     named as the new process (signals are never sent on that reading;
//     see Signal).
//   - A pid may be reused between a scan and a signal; Stop opens a pidfd,
//     re-checks that the pid holds the file, and signals through the
//     pidfd (Signal), so a reused pid gets nothing. Without pidfds
//     (kernels before 5.3, qemu-user) the window is the re-check and the
//     kill(2), narrowed but not closed.
package procscan
