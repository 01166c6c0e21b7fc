// SPDX-License-Identifier: Apache-2.0

package testproc

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/hermesbox/hbx/internal/procscan"
)

// KillAtEnd sends SIGKILL, when t ends, to the process pid names now,
// for a process the test did not start itself (a grandchild, a daemon, a
// program of a supervisor): its start time is read now and the kill goes
// through procscan's pidfd only while pid still names that process, so
// a process that exited and whose pid another took on a busy machine is
// never killed. A pid that names no process now is ignored. It returns
// the process's Stat (zero when there was none) for Signal calls of the
// test's own.
func KillAtEnd(t testing.TB, pid int) procscan.Stat {
	t.Helper()
	st, err := procscan.ReadStat(pid)
	if err != nil {
		return procscan.Stat{}
	}
	t.Cleanup(func() { st.Signal(syscall.SIGKILL) })
	return st
}

// HasEnv reports whether process pid's environment holds kv ("NAME=value")
// exactly: a proof, for procscan.Signal, that pid is still a process a
// test marked so when it started it.
func HasEnv(pid int, kv string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	return err == nil && bytes.Contains(append([]byte{0}, b...), []byte("\x00"+kv+"\x00"))
}

// KillMarkedAtEnd sends SIGKILL, when t ends, to pid while its
// environment holds kv (HasEnv): for a process whose pid a test learns
// only when it may be gone already (a daemon a command under test should
// have stopped), so its start time cannot be read while it surely lives.
func KillMarkedAtEnd(t testing.TB, pid int, kv string) {
	t.Helper()
	t.Cleanup(func() {
		procscan.Signal(pid, syscall.SIGKILL, func(pid int) bool { return HasEnv(pid, kv) })
	})
}
