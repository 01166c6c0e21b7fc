// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package testenv

import "testing"

// Tmpfs needs Linux: elsewhere it reports the missing prerequisite.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	Missing(t, "needs Linux to mount a tmpfs of "+size)
	return ""
}
