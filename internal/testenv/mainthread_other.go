// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package testenv

// MainThreadExitsEnv: see the Linux version; elsewhere it does nothing.
const MainThreadExitsEnv = "HBXTEST_MAIN_THREAD_EXITS"

// ExitMainThreadIfAsked does nothing outside Linux.
func ExitMainThreadIfAsked() {}

// MainThreadExited is false outside Linux (no /proc).
func MainThreadExited(pid int) bool { return false }
