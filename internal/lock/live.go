package lock

import (
	"errors"
	"os"
	"strconv"
	"syscall"

	"github.com/hermesbox/hbx/internal/procscan"
)

// LiveHolder returns the holder record of the lock file at path and
// whether a live process holds the lock: false when none does (free, or
// its holder died: the kernel dropped the flock, its record is stale).
// The record outlives a holder killed with SIGKILL and its pid may since
// name another process, so a live pid holds the lock only when it has the
// lock file open; when its descriptors cannot be read (another user's
// process) the record is trusted. It only reads.
func LiveHolder(path string) (Holder, bool) {
	h := ReadHolder(path)
	if h.PID <= 0 {
		return h, false
	}
	if err := syscall.Kill(h.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return h, false
	}
	pin, err := procscan.PinPath(path)
	if err != nil {
		return h, false
	}
	defer pin.Close()
	if _, err := os.ReadDir("/proc/" + strconv.Itoa(h.PID) + "/fd"); err != nil {
		return h, true
	}
	return h, procscan.Holds(h.PID, pin)
}
