// SPDX-License-Identifier: Apache-2.0

// Package testenv runs the real services hbx's tests and scripts need, and
// decides what happens when one is missing.
//
// [StartRegistry] (tests) and [Start] (scripts, demo tools) run the CNCF
// distribution registry, /usr/bin/docker-registry from the Debian package
// docker-registry, as a child process bound to 127.0.0.1 on a free port, with
// filesystem storage and plain HTTP; without authentication, or with
// htpasswd or bearer-token authentication ([StartRegistryWith], [StartWith]
// and [Options]). [Registry.Stop] stops
// it with SIGTERM (SIGKILL after a grace period) and is safe to call more
// than once, so a test can take the registry away mid-test to prove that no
// network is used. The child gets SIGKILL if the thread that started it dies
// (Linux parent-death signal); a registry started by a process killed with
// SIGKILL may otherwise outlive it.
//
// Missing dependencies: [Unavailable] fails the test when HBXTEST_E2E=1 or
// CI=true ([Strict]), and skips it otherwise; either way the message names
// scripts/testdeps.sh, which installs the registry and fetches the Bun
// tarballs. [Missing] does the same for a prerequisite testdeps.sh does not
// provide (a host tool, root), with the remedy in its message. A test skips
// with t.Skip directly only for what no install provides (a file system
// without ACLs, a gate such as HBXTEST_BENCH), with a comment "not a
// missing prerequisite: ..." just above the call; TestNoSilentSkip holds
// every test file of the module to that. Test-only variables use the
// HBXTEST_ prefix; HBX_ belongs to hbx.
package testenv
