package installer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hermesbox/hbx/release"
)

// ErrChangeRefused: an install would change the active release under data
// it cannot protect (Guard).
var ErrChangeRefused = errors.New("refuse to change the active release")

// Change is what an install does to the active release, as Guard decides.
type Change int

const (
	// KeepActive: nothing changes under the data: no release is active
	// (a first install), the active one is the configured one (a warm
	// no-op or a --verify repair), or it cannot be read but current names
	// the pinned manifest (repaired in place). Install with KeepRelease,
	// so a release changed meanwhile is refused (ErrReleaseChange).
	KeepActive Change = iota
	// ReplaceActive: the active release is replaced by a plain install
	// (KeepRelease off): the data directory is empty or absent.
	ReplaceActive
	// SwitchActive: the active release is replaced over existing data,
	// which only a recorded change with a pre-change backup may do (hbx
	// upgrade's path, so hbx rollback can undo it).
	SwitchActive
)

// GuardInput is what Guard decides from besides the install's Options.
type GuardInput struct {
	// DataDir is the payload's data directory (executor.data_dir).
	DataDir string
	// Runs says what runs on DataDir ("" when nothing); nil when the
	// caller is the supervisor itself, before it starts anything.
	Runs func() (string, error)
	// CanBackUp says a pre-change backup can be taken (a passphrase is
	// configured); without one, SwitchActive is refused.
	CanBackUp bool
}

// Guard decides how an install of opts may change the active release
// under existing data:
//
//   - KeepActive when no release is active, the active one is the one
//     opts installs (index, platform, pinned manifest), or it cannot be
//     read but current names the pinned manifest;
//   - when it cannot be read and is not the pinned one: refused while a
//     payload runs or DataDir holds data (the runtime the data was
//     written by is unknown), ReplaceActive otherwise;
//   - otherwise refused while a payload runs (pointing to hbx upgrade),
//     ReplaceActive when DataDir is empty or absent, SwitchActive when a
//     pre-change backup can be taken, refused otherwise.
//
// Refusals wrap ErrChangeRefused and name both releases and the way out;
// it only reads (the runtime directory, the data directory's first
// entry, in.Runs).
func Guard(opts Options, in GuardInput) (Change, error) {
	cur, cerr := release.Current(opts.RuntimeDir)
	switch {
	case cerr != nil && !unknownActive(opts):
		return KeepActive, nil
	case cerr != nil:
		return guardUnknown(opts, in, cerr)
	case sameRelease(cur, opts):
		return KeepActive, nil
	}
	from, to := cur.Meta.Image, opts.Image
	why, err := payloadRuns(in)
	if err != nil {
		return 0, err
	}
	if why != "" {
		return 0, fmt.Errorf("%w from %s to %s while Executor runs (%s): use %s, which backs the data up first and can be rolled back", ErrChangeRefused, from, to, why, upgradeCommand(opts))
	}
	data, err := hasData(in.DataDir)
	switch {
	case err != nil:
		return 0, err
	case !data:
		return ReplaceActive, nil
	case !in.CanBackUp:
		return 0, fmt.Errorf("%w from %s to %s over the data in %s without a pre-change backup: set backup.passphrase_file (install then backs the data up first and hbx rollback can undo the change), or use %s", ErrChangeRefused, from, to, in.DataDir, upgradeCommand(opts))
	}
	return SwitchActive, nil
}

// guardUnknown decides over an active release that cannot be read (cerr)
// and is not the pinned one: refused while a payload runs or when the
// data directory holds data (the release the data was written by is
// unknown, so no pre-change backup can be recorded against it);
// ReplaceActive otherwise.
func guardUnknown(opts Options, in GuardInput, cerr error) (Change, error) {
	why, err := payloadRuns(in)
	if err != nil {
		return 0, err
	}
	if why != "" {
		return 0, fmt.Errorf("%w to %s while Executor runs (%s): the active release cannot be read (%w); use %s once it is repaired", ErrChangeRefused, opts.Image, why, cerr, upgradeCommand(opts))
	}
	data, err := hasData(in.DataDir)
	if err != nil {
		return 0, err
	}
	if data {
		return 0, fmt.Errorf("%w to %s over the data in %s: the active release cannot be read (%w) and is not the pinned one, so the runtime the data was written by is unknown; pin that release's manifest in executor.platform_digests and run hbx install to repair it, then %s", ErrChangeRefused, opts.Image, in.DataDir, cerr, upgradeCommand(opts))
	}
	return ReplaceActive, nil
}

// payloadRuns is in.Runs(), "" when the caller is the supervisor.
func payloadRuns(in GuardInput) (string, error) {
	if in.Runs == nil {
		return "", nil
	}
	return in.Runs()
}

// sameRelease reports whether cur is the release opts installs (by
// identity: index, platform, pinned manifest); true when opts cannot be
// parsed (Install reports that).
func sameRelease(cur *release.Installed, opts Options) bool {
	ref, err := ParseReference(opts.Image)
	if err != nil {
		return true
	}
	plat, err := ParsePlatform(opts.Platform)
	if err != nil {
		return true
	}
	return cur.Meta.Matches(ref.Digest(), plat.String(), opts.PlatformDigest) == nil
}

// unknownActive reports whether the runtime directory's current link
// names a release (releases/<manifest hex>, present or not) that is not
// the pinned manifest of opts: when it cannot be read, whether an install
// changes the runtime under the data cannot be told.
func unknownActive(opts Options) bool {
	target, err := os.Readlink(filepath.Join(opts.RuntimeDir, release.CurrentLink))
	if err != nil {
		return false // no current link: a first install
	}
	return opts.PlatformDigest == "" || target != release.ReleasesDir+"/"+opts.PlatformDigest.Encoded()
}

// hasData reports whether dir exists and has entries.
func hasData(dir string) (bool, error) {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read data directory: %w", err)
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read data directory %s: %w", dir, err)
	}
	return true, nil
}

// upgradeCommand is the hbx upgrade command line that makes the change
// opts asks for: "hbx upgrade --image IMAGE", with "--from PATH" when the
// image is read from a local one.
func upgradeCommand(opts Options) string {
	if opts.From != "" {
		return "hbx upgrade --image " + opts.Image + " --from " + opts.From
	}
	return "hbx upgrade --image " + opts.Image
}
