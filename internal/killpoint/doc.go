// Package killpoint lets end-to-end tests kill hbx at an exact point of a
// crash-sensitive step (syscall-exact crash windows), the way a power loss
// would.
//
// It is inert in the product: only a binary built with the build tag
// hbxtest (the Makefile's e2e-bin, and the e2e suite's own build) reads
// the environment. There, HBXTEST_KILL_AT naming a point makes the first
// call of At with that name send SIGKILL to the process itself, and
// HBXTEST_HOLD_AT ("point=file") makes Hold at that point wait while the
// file exists. Without the tag At and Hold do nothing and the package
// imports nothing (internal/boundary checks both), so `make build` and
// `make cross` binaries carry no kill switch whatever their environment.
package killpoint
