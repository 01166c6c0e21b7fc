// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package testenv

import (
	"fmt"
	"strconv"
)

// MainThreadExitsEnv: see the Linux version; elsewhere it does nothing.
const MainThreadExitsEnv = "HBXTEST_MAIN_THREAD_EXITS"

// MainThreadBoundEnv: see the Linux version.
const MainThreadBoundEnv = "HBXTEST_MAIN_THREAD_BOUND"

// MainThreadExitsWatching: see the Linux version.
func MainThreadExitsWatching(pid int) string {
	return MainThreadExitsEnv + "=" + strconv.Itoa(pid)
}

// ExitMainThreadIfAsked does nothing outside Linux.
func ExitMainThreadIfAsked() {}

// MainThreadExited is false outside Linux (no /proc).
func MainThreadExited(pid int) bool { return false }

// AwaitMainThreadExit: see the Linux version; here it always fails.
func AwaitMainThreadExit(pid int) error {
	return fmt.Errorf("process %d: main threads exiting alone is Linux's", pid)
}
