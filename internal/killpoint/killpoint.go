// Package killpoint lets end-to-end tests kill hbx at an exact point of a
// crash-sensitive step (syscall-exact crash windows), the way a power loss
// would.
//
// It is inert unless the environment variable HBXTEST_KILL_AT names a
// point: then the first call of At with that name sends SIGKILL to the
// process itself. Nothing else reads the variable; production runs never
// set it.
package killpoint

import (
	"os"
	"syscall"
	"time"
)

// Env names the point to die at.
const Env = "HBXTEST_KILL_AT"

// Points placed in hbx.
const (
	// BeforeSwitch and AfterSwitch surround the rename that moves the
	// runtime directory's current link (installer).
	BeforeSwitch = "runtime-switch-before"
	AfterSwitch  = "runtime-switch-after"
	// BeforePin and AfterPin surround the config file write of a
	// restore's release pin (backup).
	BeforePin = "config-pin-before"
	AfterPin  = "config-pin-after"
)

var at = os.Getenv(Env)

// At kills the process with SIGKILL when HBXTEST_KILL_AT is name.
func At(name string) {
	if at != "" && at == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute) // the signal is on its way
	}
}
