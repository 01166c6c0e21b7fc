// SPDX-License-Identifier: Apache-2.0

package testenv

import "syscall"

// childProcAttr makes the kernel kill a child whose starting thread dies.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
