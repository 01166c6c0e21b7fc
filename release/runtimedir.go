package release

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/hermesbox/hbx/internal/fsat"
	"github.com/hermesbox/hbx/internal/lock"
)

// Names inside the runtime directory besides the releases and their links
// (ReleasesDir, CurrentLink, PreviousLink): the installer's working areas
// and the lock every command that changes the runtime directory takes.
const (
	// StagingDir holds trees being applied; removed by the next install.
	StagingDir = "staging"
	// BlobsDir is the blob store (blobs/sha256/<hex>), verified on read.
	BlobsDir = "blobs"
	// ScratchDir holds partial downloads and temporary files.
	ScratchDir = "tmp"
	// LockFile is the runtime directory's lock (install, activate, backup,
	// restore, upgrade, rollback); its content names the holder.
	LockFile = "hbx.lock"
)

// LockRuntime creates runtimeDir (mode 0755, ancestors too) and takes its
// lock (LockFile) for command, waiting up to wait (0: not at all) and
// logging the holder once on log when it has to wait. The error is the
// directory's creation error or lock.Acquire's (a *lock.HeldError names
// the holder; ctx's error when cancelled while waiting).
func LockRuntime(ctx context.Context, runtimeDir, command string, wait time.Duration, log *slog.Logger) (*lock.Lock, error) {
	if err := fsat.MkdirAll(runtimeDir, 0o755); err != nil {
		return nil, fmt.Errorf("create runtime directory: %w", err)
	}
	return LockExisting(ctx, runtimeDir, command, wait, log)
}

// LockExisting is LockRuntime for a runtime directory that must already
// exist (activating a published release): it creates no directory, so
// over a missing one it fails (lock.Acquire's error) and changes nothing.
func LockExisting(ctx context.Context, runtimeDir, command string, wait time.Duration, log *slog.Logger) (*lock.Lock, error) {
	return lock.Acquire(ctx, filepath.Join(runtimeDir, LockFile), command, wait, func(h lock.Holder) {
		if log != nil {
			log.Info("waiting for the runtime directory's lock", "holder", h.String(), "wait", wait)
		}
	})
}
