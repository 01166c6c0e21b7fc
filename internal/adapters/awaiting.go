package adapters

// Restore without a runtime (backup.ErrRuntimeUnavailable,
// backup.AwaitedRuntime): which install failures mean "could not get the
// runtime", and the checks of the commands that would start or change a
// release on data restored without its runtime.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"

	"go.podman.io/image/v5/docker"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/rehearse"
	"github.com/hermesbox/hbx/upgrade"
)

// runtimeUnavailable reports whether an install failed because the image
// could not be had at all: no network or name resolution, the registry
// refusing connections, timing out, stalling, answering 5xx or not
// having the image (404). A failure after the bytes were had (a digest,
// platform or media type mismatch, an unrunnable image, no space, a bad
// configuration or reference, a refused release change) is not.
func runtimeUnavailable(err error) bool {
	for _, not := range []error{installer.ErrDigestMismatch, installer.ErrPlatform, installer.ErrUnsupported, installer.ErrUnrunnable,
		installer.ErrNoSpace, installer.ErrNotOwned, installer.ErrBadReference, installer.ErrChangeRefused, installer.ErrReleaseChange, config.ErrInvalid} {
		if errors.Is(err, not) {
			return false
		}
	}
	if errors.Is(err, installer.ErrStalled) || errors.Is(err, installer.ErrTimeout) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN, syscall.ETIMEDOUT} {
		if errors.Is(err, errno) {
			return true
		}
	}
	if ne, ok := errors.AsType[net.Error](err); ok {
		// A bare errno is a net.Error too (it has Timeout and
		// Temporary): a local file's (ELOOP, EACCES, EIO under an
		// *fs.PathError) is no network's, whose errnos are those above.
		if _, local := ne.(syscall.Errno); !local {
			return true // DNS ("no such host"), dial and timeout errors
		}
	}
	if he, ok := errors.AsType[docker.UnexpectedHTTPStatusError](err); ok {
		return he.StatusCode >= 500 || he.StatusCode == http.StatusNotFound || he.StatusCode == http.StatusRequestTimeout || he.StatusCode == http.StatusTooManyRequests
	}
	return false
}

// registryUnreachable reports whether an install failed because no
// registry answered at all: no network or name resolution, connections
// refused, reset or timing out (after the retries). A registry that
// answered (any HTTP status), or that was reached but stalled or too slow
// for the install's deadline, was reachable: the offline hint would
// mislead there. So would it after the release was staged: a change
// rolled back (upgrade.ErrRolledBack) or a rehearsal refused
// (rehearse.ErrRefused) may end in a connection refused by the local
// Executor; and a context deadline (a health wait's; it is a net.Error
// too) is no registry's.
func registryUnreachable(err error) bool {
	if !runtimeUnavailable(err) || errors.Is(err, installer.ErrStalled) || errors.Is(err, installer.ErrTimeout) ||
		errors.Is(err, upgrade.ErrRolledBack) || errors.Is(err, rehearse.ErrRefused) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	_, answered := errors.AsType[docker.UnexpectedHTTPStatusError](err)
	return !answered
}

// OfflineHint adds to the error of an install or upgrade from the registry
// (from "") that found no registry reachable how to go on without one:
// "offline: CMD --from FILE (see docs/install.md#offline-install)". Other errors,
// and those of --from, are returned as they are.
func OfflineHint(err error, from, cmd string) error {
	if err == nil || from != "" || !registryUnreachable(err) {
		return err
	}
	return fmt.Errorf("%w; offline: %s --from FILE (see docs/install.md#offline-install)", err, cmd)
}

// wrapUnavailable marks an install error that means "could not get the
// runtime" with backup.ErrRuntimeUnavailable.
func wrapUnavailable(err error) error {
	if err != nil && runtimeUnavailable(err) {
		return fmt.Errorf("%w: %w", backup.ErrRuntimeUnavailable, err)
	}
	return err
}

// Awaited is the *backup.AwaitedError of cfg's data when it was restored
// without its runtime and that runtime is not active; nil otherwise.
func Awaited(cfg *config.Config) *backup.AwaitedError {
	var ae *backup.AwaitedError
	if !errors.As(backup.AwaitedRuntime(cfg.Executor.DataDir, cfg.Executor.RuntimeDir), &ae) {
		return nil
	}
	return ae
}

// AwaitsImage reports whether cfg's data was restored without its runtime
// and waits for image (compared by index digest, else by reference).
func AwaitsImage(cfg *config.Config, image string) bool {
	ae := Awaited(cfg)
	if ae == nil {
		return false
	}
	_, want, _ := strings.Cut(ae.Image, "@")
	_, got, _ := strings.Cut(image, "@")
	return ae.Image == image || want != "" && want == got
}
