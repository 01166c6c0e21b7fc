package procscan

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// Signal sends sig to pid only when proof(pid) holds for the process
// that has pid at the time of the signal: a pidfd is opened on pid
// first, proof is checked, and the signal goes through the pidfd. A
// process that died after the pidfd was opened gets nothing
// (pidfd_send_signal fails with ESRCH), so a pid reused by an unrelated
// process between the proof and the signal is never signalled: what
// proof read of /proc/PID was the pinned process's while it lived.
// Without pidfds (ENOSYS: kernels before 5.3, qemu-user) it calls
// kill(2) right after the proof, the narrow window the pidfd closes. It
// reports whether the signal was sent.
func Signal(pid int, sig syscall.Signal, proof func(pid int) bool) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		defer unix.Close(fd)
		return proof(pid) && unix.PidfdSendSignal(fd, sig, nil, 0) == nil
	case errors.Is(err, unix.ENOSYS):
		return proof(pid) && syscall.Kill(pid, sig) == nil
	}
	return false // ESRCH: gone already
}

// Signal sends sig to s.PID only while that pid names the process s was
// read from (the same start time: a pid is reused, a pid and start time
// are not), through Signal's pidfd, and reports whether it did. A
// process that has exited, its pid free or taken by another, gets
// nothing.
func (s Stat) Signal(sig syscall.Signal) bool {
	return Signal(s.PID, sig, func(pid int) bool {
		now, err := ReadStat(pid)
		return err == nil && now.StartTime == s.StartTime
	})
}
