//go:build !linux

package testcgroup

import "testing"

// RunInCgroup runs m: there are no cgroups here.
func RunInCgroup(m *testing.M, _ bool) int { return m.Run() }

// RemoveCgroup does nothing: there are no cgroups here.
func RemoveCgroup(testing.TB, string) {}

// RemoveNewCgroups does nothing: there are no cgroups here.
func RemoveNewCgroups(testing.TB) {}
