package adapters

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"testing"

	"go.podman.io/image/v5/docker"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/rehearse"
	"github.com/hermesbox/hbx/upgrade"
)

// TestRuntimeUnavailable: only the install failures that mean "could not
// get the image" let a restore go on without its runtime; a failure after
// the bytes were had, or a configuration error, does not, even when a
// network error is in its chain; nor does a local file's errno (a
// syscall.Errno is a net.Error too: an ELOOP, EACCES or EIO counted as the
// network's, and a symlinked upgrade.json got the offline hint).
func TestRuntimeUnavailable(t *testing.T) {
	dns := &net.DNSError{Err: "no such host", Name: "registry.example", IsNotFound: true}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"no such host", fmt.Errorf("fetch index sha256:ab from registry.example: %w", dns), true},
		{"connection refused", fmt.Errorf("fetch index: after 4 attempts: %w", refused), true},
		{"stalled", fmt.Errorf("fetch blob: %w", installer.ErrStalled), true},
		{"install deadline", fmt.Errorf("install: %w", installer.ErrTimeout), true},
		{"503", fmt.Errorf("fetch index: %w", docker.UnexpectedHTTPStatusError{StatusCode: 503}), true},
		{"404", fmt.Errorf("fetch index: %w", docker.UnexpectedHTTPStatusError{StatusCode: 404}), true},
		{"401", fmt.Errorf("fetch index: %w", docker.UnexpectedHTTPStatusError{StatusCode: 401}), false},
		{"digest mismatch", fmt.Errorf("fetch manifest: %w", installer.ErrDigestMismatch), false},
		{"digest mismatch after a reset", fmt.Errorf("%w: %w", installer.ErrDigestMismatch, refused), false},
		{"unrunnable", fmt.Errorf("validate: %w", installer.ErrUnrunnable), false},
		{"no space", installer.ErrNoSpace, false},
		{"bad config", fmt.Errorf("%w: registry.auth_file", config.ErrInvalid), false},
		{"other", errors.New("something else"), false},
		{"local file error", fmt.Errorf("read upgrade journal: %w", &fs.PathError{Op: "open", Path: "/r/upgrade.json", Err: syscall.ELOOP}), false},
		{"local permission error", fmt.Errorf("stage: %w", &fs.PathError{Op: "open", Path: "/r/tmp", Err: syscall.EACCES}), false},
		{"local I/O error", fmt.Errorf("extract: %w", os.NewSyscallError("write", syscall.EIO)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := runtimeUnavailable(tc.err); got != tc.want {
				t.Errorf("runtimeUnavailable(%v) = %v, want %v", tc.err, got, tc.want)
			}
			if got := errors.Is(wrapUnavailable(tc.err), backup.ErrRuntimeUnavailable); got != tc.want {
				t.Errorf("wrapUnavailable(%v) wraps ErrRuntimeUnavailable: %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestOfflineHint: the "offline: --from FILE" hint ends an install or
// upgrade error only when no registry answered at all; a registry that
// answered, stalled or was too slow was reachable, and a --from install
// gets no hint (TestInstallStalledRegistryE2E pins the stalled line).
func TestOfflineHint(t *testing.T) {
	dns := &net.DNSError{Err: "no such host", Name: "registry.example", IsNotFound: true}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	const hint = "; offline: hbx install --from FILE (see docs/install.md#offline-install)"
	for _, tc := range []struct {
		name string
		err  error
		from string
		want bool
	}{
		{"no such host", fmt.Errorf("fetch index: %w", dns), "", true},
		{"connection refused", fmt.Errorf("fetch index: after 4 attempts: %w", refused), "", true},
		{"stalled", fmt.Errorf("fetch layer: after 3 attempts: %w", installer.ErrStalled), "", false},
		{"install deadline", fmt.Errorf("install: %w", installer.ErrTimeout), "", false},
		{"503", fmt.Errorf("fetch index: %w", docker.UnexpectedHTTPStatusError{StatusCode: 503}), "", false},
		{"digest mismatch", fmt.Errorf("fetch manifest: %w", installer.ErrDigestMismatch), "", false},
		{"from a file", fmt.Errorf("fetch index: %w", refused), "/media/usb/executor.tar", false},
		{"health wait deadline after a rollback", fmt.Errorf("%w to x: health on y: %w", upgrade.ErrRolledBack, context.DeadlineExceeded), "", false},
		{"local Executor refused after a rollback", fmt.Errorf("%w to x: health on y: %w", upgrade.ErrRolledBack, refused), "", false},
		{"rehearsal refused", fmt.Errorf("rehearse y: %w: %w", rehearse.ErrRefused, refused), "", false},
		{"resume's health wait deadline", fmt.Errorf("pre-upgrade backup: boom; not healthy on x: %w", context.DeadlineExceeded), "", false},
		{"upgrade journal a symlink", fmt.Errorf("read upgrade journal: %w", &fs.PathError{Op: "open", Path: "/r/upgrade.json", Err: syscall.ELOOP}), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := OfflineHint(tc.err, tc.from, "hbx install").Error()
			if has := len(got) > len(hint) && got[len(got)-len(hint):] == hint; has != tc.want {
				t.Errorf("OfflineHint(%v) = %q, want the hint: %v", tc.err, got, tc.want)
			}
		})
	}
}
