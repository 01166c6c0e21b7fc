// Package executorrun prepares the executor's launch on this box and runs
// it in the foreground (`hbx run executor`): Prepare is what both the
// supervisor's executor program (internal/adapters's SuperviseOptions builds it
// at each start) and Run call before launch: nothing starts on data
// restored without its runtime (backup.AwaitedRuntime), the dedicated user
// exists (EnsureUser), a release installed with the image's owners is made
// root's, and where launch says "run hbx install first" while a restore or
// release change is half done, the error names that change and what
// finishes or undoes it.
//
// It is a composer (internal/boundary's list): it reads backup's and
// upgrade's journals for launch. It prints nothing; its logs go to the
// logger it is given. It reads the journals and changes nothing on disk
// but the release's ownership (installer.FixOwnership) and the dedicated
// user.
package executorrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/launch"
	"github.com/hermesbox/hbx/upgrade"
)

// ErrUpgradeInterrupted: the executor cannot start because an upgrade is
// half done (Prepare).
var ErrUpgradeInterrupted = errors.New("an upgrade is half done")

// ErrRestoreInterrupted: the executor cannot start because a restore is
// half done (Prepare).
var ErrRestoreInterrupted = errors.New("a restore is half done")

// Prepare is launch.Prepare, except that where Prepare says "run
// `hbx install` first" while a restore is half done (<data_dir>.restore.json
// in phase staging or swapping) or an upgrade is (upgrade.json in a phase
// other than done, rolled-back or aborted), the error names the interrupted
// change and the commands that finish or undo it instead: hbx install
// would put a runtime on data of another release. A release an earlier hbx
// installed with the image's owners is made root's alone before it runs
// (installer.FixOwnership). On data restored without its runtime
// (backup.AwaitedRuntime) nothing starts until that release is active: the
// error, wrapping backup.ErrRuntimeAwaited, names it.
func Prepare(ctx context.Context, lo launch.Options, log *slog.Logger) (*launch.Spec, error) {
	if aerr := backup.AwaitedRuntime(lo.DataDir, lo.RuntimeDir); errors.Is(aerr, backup.ErrRuntimeAwaited) {
		return nil, aerr
	}
	if err := EnsureUser(ctx, lo.User, log); err != nil {
		return nil, err
	}
	spec, err := launch.Prepare(lo)
	if err == nil {
		if spec.Credential == nil && os.Geteuid() == 0 {
			log.Warn("Executor runs as root (executor.user " + lo.User + "): tool code it runs that breaks out owns the box; leave executor.user unset for the unprivileged user " + account.Dedicated)
		}
		if err := installer.FixOwnership(ctx, lo.RuntimeDir, time.Minute, log); err != nil {
			return nil, fmt.Errorf("run executor: %w", err)
		}
		return spec, nil
	}
	if !errors.Is(err, launch.ErrNotInstalled) {
		return spec, err
	}
	return nil, explainNotInstalled(lo, err)
}

// Check runs the checks of Prepare that change nothing, with its errors:
// data restored without its runtime (backup.ErrRuntimeAwaited), a bad env
// or token file, and an active release that does not match lo's pin
// (launch.ErrNotInstalled, or ErrRestoreInterrupted or
// ErrUpgradeInterrupted when a restore or an upgrade is half done). It
// creates no user or directory and fixes no ownership: the supervisor runs
// it before a restart stops a running Executor (supervisor.Program.Check).
func Check(lo launch.Options) error {
	if aerr := backup.AwaitedRuntime(lo.DataDir, lo.RuntimeDir); errors.Is(aerr, backup.ErrRuntimeAwaited) {
		return aerr
	}
	err := launch.CheckActive(lo)
	if !errors.Is(err, launch.ErrNotInstalled) {
		return err
	}
	return explainNotInstalled(lo, err)
}

// explainNotInstalled returns err (launch.ErrNotInstalled's), or, while a
// restore or an upgrade is half done, an error that names it and the
// commands that finish or undo it instead.
func explainNotInstalled(lo launch.Options, err error) error {
	cause := err
	if m, ok := err.(interface{ Unwrap() []error }); ok {
		if errs := m.Unwrap(); len(errs) == 2 && errs[0] == launch.ErrNotInstalled {
			cause = errs[1]
		}
	}
	// A restore switches the runtime and the pin with the data: one
	// half done is undone (runtime and pin included) by its recovery.
	if r, rerr := backup.ReadPendingRestore(lo.DataDir); rerr == nil && r != nil && r.Unfinished() {
		return fmt.Errorf("%w: the restore of %s was interrupted in phase %s (started %s; %s); do not run hbx install, which changes the runtime without the data that goes with it: run `hbx backup`, or restart `hbx supervise`, which undo it first (runtime, pin and data together): %w",
			ErrRestoreInterrupted, r.Archive, r.Phase, r.Started.Format(time.RFC3339), r.Journal, cause)
	}
	j, jerr := upgrade.ReadJournal(lo.RuntimeDir)
	if jerr != nil || j == nil || !j.Pending() {
		return err
	}
	by := j.By
	if by == "" {
		by = "hbx upgrade"
	}
	return fmt.Errorf("%w: the release change (%s) from %s to %s was interrupted in phase %s (%s); do not run hbx install, which changes the runtime without the data that goes with it: run `hbx rollback` to undo it, or restart `hbx supervise`, which undoes it first: %w",
		ErrUpgradeInterrupted, by, j.Old.Image, j.New.Image, j.Phase, filepath.Join(lo.RuntimeDir, upgrade.JournalFile), cause)
}

// LogTightened logs, one line each, the data and state directories
// launch.Prepare made 0700 and executor.user's, and those whose
// root-owned entries it handed over to executor.user.
func LogTightened(log *slog.Logger, spec *launch.Spec) {
	for _, h := range spec.HandedOver {
		log.Warn("data of an Executor that ran as root handed over to executor.user", "change", h)
	}
	for _, t := range spec.Tightened {
		log.Warn("directory made private to executor.user", "change", t)
	}
}

// Run runs lo's active release in the foreground (hbx run executor):
// Prepare, LogTightened, then launch.Run with held (the data directory's
// lock) inherited as the payload's fd 3; the payload's exit status comes
// back as launch.Run's *launch.ExitError.
func Run(ctx context.Context, lo launch.Options, held *os.File, stdout, stderr io.Writer, log *slog.Logger) error {
	spec, err := Prepare(ctx, lo, log)
	if err != nil {
		return err
	}
	LogTightened(log, spec)
	spec.ExtraFiles = []*os.File{held}
	return launch.Run(ctx, spec, stdout, stderr, log)
}

// EnsureUser creates user when it is account.Dedicated (the default
// executor.user when hbx runs as root) and the user database lacks it
// (account.EnsureSystemUser), logging that it did. Another missing user
// is left to the lookups that name it. Errors start with "executor.user: ".
func EnsureUser(ctx context.Context, user string, log *slog.Logger) error {
	if user != account.Dedicated {
		return nil
	}
	created, err := account.EnsureSystemUser(ctx, account.Dedicated)
	if err != nil {
		return fmt.Errorf("executor.user: %w", err)
	}
	if created {
		log.Info("created the unprivileged system user Executor runs as", "user", account.Dedicated)
	}
	return nil
}
