package health

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/fsat"
	"github.com/hermesbox/hbx/internal/regfile"
)

// ErrDataDir is wrapped by the error of DataDir.
var ErrDataDir = errors.New("bad data directory")

// DataDir checks Executor's data directory: path exists (symlinks are
// followed) and is a directory, is owned by owner (a user name or numeric
// uid), and neither its group nor others have any permission on it (mode
// 0700 or stricter), and is not a mount point (a restore swaps it with a
// sibling directory by rename). It returns the directory's mode and nil, or an error
// wrapping ErrDataDir that says which rule is broken and what was found.
func DataDir(path, owner string) (os.FileMode, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	if !st.IsDir() {
		return st.Mode(), fmt.Errorf("%w: %s is not a directory (it is %s)", ErrDataDir, path, regfile.Kind(st.Mode()))
	}
	uid, err := lookupUID(owner)
	if err != nil {
		return st.Mode(), fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return st.Mode(), fmt.Errorf("%w: %s: no owner information", ErrDataDir, path)
	}
	if int(sys.Uid) != uid {
		return st.Mode(), fmt.Errorf("%w: %s is owned by %s, want %s", ErrDataDir, path, userName(int(sys.Uid)), userName(uid))
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return st.Mode(), fmt.Errorf("%w: %s is mode %04o, want 0700 or stricter", ErrDataDir, path, perm)
	}
	if mnt, err := fsat.IsMountRoot(path); err != nil {
		return st.Mode(), fmt.Errorf("%w: %w", ErrDataDir, err)
	} else if mnt {
		return st.Mode(), fmt.Errorf("%w: %s is a mount point: a restore swaps it with a sibling, which cannot move a mount (mount the volume on its parent)", ErrDataDir, path)
	}
	return st.Mode(), nil
}

// lookupUID resolves a user name or numeric uid.
func lookupUID(name string) (int, error) {
	uid, _, err := account.IDs(name)
	if err != nil {
		return 0, fmt.Errorf("owner: %w", err)
	}
	return uid, nil
}

// userName renders uid as "uid 1000 (executor)", or "uid 1000" when the
// user database has no name for it.
func userName(uid int) string {
	if name, ok := account.Name(uid); ok {
		return fmt.Sprintf("uid %d (%s)", uid, name)
	}
	return fmt.Sprintf("uid %d", uid)
}
