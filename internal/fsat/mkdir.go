package fsat

import (
	"errors"
	"os"
	"path/filepath"
)

// MkdirAll creates p and its missing parents like os.MkdirAll, then gives
// each directory it created mode perm whatever the process umask: root's
// umask is 077 on hardened hosts, and a runtime, release or data parent
// directory created 0700 keeps executor.user from reaching what is below.
// Existing directories are left as they are. Not safe against a
// concurrent writer of the parents (they are checked to be root's, see
// internal/pathtrust).
func MkdirAll(p string, perm os.FileMode) error {
	var created []string
	for d := filepath.Clean(p); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		created = append(created, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	if err := os.MkdirAll(p, perm); err != nil {
		return err
	}
	for i := len(created) - 1; i >= 0; i-- {
		if err := os.Chmod(created[i], perm); err != nil {
			return err
		}
	}
	return nil
}
