// Package killpoint lets end-to-end tests kill hbx at an exact point of a
// crash-sensitive step (syscall-exact crash windows), the way a power loss
// would.
//
// It is inert unless the environment variable HBXTEST_KILL_AT names a
// point: then the first call of At with that name sends SIGKILL to the
// process itself. Likewise HBXTEST_HOLD_AT ("point=file") makes Hold at
// that point wait while the file exists. Nothing else reads the
// variables; production runs never set them.
package killpoint

import (
	"os"
	"strings"
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
	// UpgradeHealthWait is where hbx upgrade has activated the new
	// release, released the hold and starts waiting for its health
	// (journal phase activating; package upgrade).
	UpgradeHealthWait = "upgrade-health-wait"
)

var at = os.Getenv(Env)

// At kills the process with SIGKILL when HBXTEST_KILL_AT is name.
func At(name string) {
	if at != "" && at == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute) // the signal is on its way
	}
}

// HoldEnv names a point to hold at and a file: "point=/path/to/file".
const HoldEnv = "HBXTEST_HOLD_AT"

// SupervisorRecovery is where a running supervisor looks for a release
// change or restore whose command died (cmd/hbx), before it resolves it.
const SupervisorRecovery = "supervisor-recovery"

var holdAt = os.Getenv(HoldEnv)

// Hold blocks while HBXTEST_HOLD_AT is "name=file" and file exists, so
// an end-to-end test can look at the state before the point.
func Hold(name string) {
	point, file, ok := strings.Cut(holdAt, "=")
	if !ok || point != name {
		return
	}
	for {
		if _, err := os.Lstat(file); err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
