// SPDX-License-Identifier: Apache-2.0

// Package testproc holds test helpers that signal processes a test did
// not start, by identity (pid and start time), never by a bare pid a busy
// machine may have given to another process since. It is apart from
// testenv because procscan's own tests import testenv.
package testproc
