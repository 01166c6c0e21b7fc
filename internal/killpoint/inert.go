//go:build !hbxtest

package killpoint

// Armed reports whether this build reads HBXTEST_KILL_AT and
// HBXTEST_HOLD_AT: false, the product build (no build tag hbxtest).
const Armed = false

// At does nothing: the product build has no kill points.
func At(string) {}

// Hold does nothing: the product build has no hold points.
func Hold(string) {}
