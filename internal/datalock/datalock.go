// Package datalock is the lock tied to a data directory that whatever runs
// the payload holds. This is a minimal version: Path and Check only.
package datalock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrBusy: the data directory's lock is held (a payload runs on it).
var ErrBusy = errors.New("data directory is in use")

// Path is the lock file of dataDir: beside it, not inside it (a restore
// swaps the directory), named .<base>.lock.
func Path(dataDir string) string {
	d := filepath.Clean(dataDir)
	return filepath.Join(filepath.Dir(d), "."+filepath.Base(d)+".lock")
}

// Check returns nil when dataDir's lock is free or its file is missing (it
// creates nothing), else an error wrapping ErrBusy.
func Check(dataDir string) error {
	p := Path(dataDir)
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check data directory lock %s: %w", p, err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("%w: %s is held", ErrBusy, p)
		}
		return fmt.Errorf("check data directory lock %s: %w", p, err)
	}
	return nil
}
