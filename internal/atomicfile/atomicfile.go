// Package atomicfile writes files and symlinks so that a crash leaves either
// the old content or the new, never a mix, and the new one survives power
// loss once the call returns.
//
// Every write follows the same five steps: temporary file in the target's
// directory, write, fsync, close, rename over the target, fsync the
// directory. Temporary names start with ".tmp-" so a later cleanup can find
// what a crash left behind (see IsTemp).
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// TempPrefix starts the name of every temporary file this package creates.
const TempPrefix = ".tmp-"

// IsTemp reports whether a directory entry name is one of our temporary files.
func IsTemp(name string) bool { return strings.HasPrefix(name, TempPrefix) }

func tempName(dir, base string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return filepath.Join(dir, TempPrefix+base+"-"+hex.EncodeToString(b[:]))
}

// WriteFile durably replaces path with data, created with perm (not
// subject to the umask).
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write durably replaces path with what fill writes. On any error the
// target is untouched and the temporary file removed.
func Write(path string, perm os.FileMode, fill func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp := tempName(dir, base)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := fill(f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename into %s: %w", path, err)
	}
	return SyncDir(dir)
}

// Symlink durably points the symlink at path to target, replacing whatever
// is there in one rename: readers see the old link or the new, never none.
func Symlink(target, path string) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp := tempName(dir, base)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("create temporary symlink: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename symlink into %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory so renames and creations in it are durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// SyncFS flushes the whole filesystem holding path (syncfs(2)): one call
// instead of an fsync per file after writing a large tree.
func SyncFS(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("syncfs %s: %w", path, err)
	}
	return nil
}
