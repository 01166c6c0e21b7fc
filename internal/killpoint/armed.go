//go:build hbxtest

package killpoint

import (
	"os"
	"strings"
	"syscall"
	"time"
)

// Armed reports whether this build reads HBXTEST_KILL_AT and
// HBXTEST_HOLD_AT: true only with the build tag hbxtest.
const Armed = true

var (
	at     = os.Getenv(Env)
	holdAt = os.Getenv(HoldEnv)
)

// At kills the process with SIGKILL when HBXTEST_KILL_AT is name.
func At(name string) {
	if at != "" && at == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute) // the signal is on its way
	}
}

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
