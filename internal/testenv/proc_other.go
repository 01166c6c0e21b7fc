// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package testenv

import "syscall"

// childProcAttr has no parent-death signal to ask for outside Linux.
func childProcAttr() *syscall.SysProcAttr { return nil }
