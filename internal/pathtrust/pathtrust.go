package pathtrust

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// ErrUntrusted: the path or an ancestor can be written by a user other
// than root and the trusted ones.
var ErrUntrusted = errors.New("path is writable by an untrusted user")

// Trust lists the users and groups trusted besides root (uid and gid 0).
type Trust struct {
	UIDs []uint32
	GIDs []uint32
}

// Check refuses p (what names it, such as "executor.runtime_dir", for the
// error) when p or any of its ancestors, as written or as symlinks
// resolve, is owned by a user other than root and t.UIDs, or is writable
// by others or by a group other than gid 0 and t.GIDs (see the package
// documentation for the sticky exception). With ancestorsOnly, p itself
// is not checked, only what holds it. The error wraps ErrUntrusted and
// names the component, its owner and mode.
func Check(what, p string, ancestorsOnly bool, t Trust) error {
	abs, err := filepath.Abs(p)
	if err != nil {
		return fmt.Errorf("check %s %s: %w", what, p, err)
	}
	if err := checkChain(what, p, abs, ancestorsOnly, t); err != nil {
		return err
	}
	// The same chain with symlinks resolved, from the nearest existing
	// component.
	existing, rest := abs, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return nil
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return fmt.Errorf("check %s %s: %w", what, p, err)
	}
	if real = filepath.Join(real, rest); real == abs {
		return nil
	}
	return checkChain(what, p, real, ancestorsOnly, t)
}

// checkChain checks abs's existing components, from "/" down.
func checkChain(what, p, abs string, ancestorsOnly bool, t Trust) error {
	var chain []string
	for d := abs; ; d = filepath.Dir(d) {
		chain = append(chain, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	slices.Reverse(chain)
	for _, c := range chain {
		self := c == abs
		if self && ancestorsOnly {
			return nil
		}
		st, err := os.Lstat(c)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // what is missing hbx creates, root's
		}
		if err != nil {
			return fmt.Errorf("check %s %s: %w", what, p, err)
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			continue
		}
		if why := untrusted(st, self, t); why != "" {
			sys := st.Sys().(*syscall.Stat_t)
			where := c
			if !self {
				where = "its ancestor " + c
			}
			return fmt.Errorf("%w: %s %s: %s is owned by %s:%s with mode %04o, %s: make it root's and writable by root alone",
				ErrUntrusted, what, p, where, userName(sys.Uid), groupName(sys.Gid), permBits(st.Mode()), why)
		}
	}
	return nil
}

// untrusted says why st may be written by an untrusted user, or "".
func untrusted(st fs.FileInfo, self bool, t Trust) string {
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != 0 && !slices.Contains(t.UIDs, sys.Uid) {
		return "an owner hbx does not trust there"
	}
	perm := st.Mode().Perm()
	if !self && st.IsDir() && st.Mode()&fs.ModeSticky != 0 && sys.Uid == 0 {
		return "" // /tmp: only an entry's owner may rename or remove it
	}
	if perm&0o002 != 0 {
		return "writable by others"
	}
	if perm&0o020 != 0 && sys.Gid != 0 && !slices.Contains(t.GIDs, sys.Gid) {
		return "writable by a group other than root's"
	}
	return ""
}

// permBits returns m's permission, setuid, setgid and sticky bits as
// chmod's octal.
func permBits(m fs.FileMode) uint32 {
	b := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		return u.Username
	}
	return strconv.Itoa(int(uid))
}

func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.Itoa(int(gid))); err == nil {
		return g.Name
	}
	return strconv.Itoa(int(gid))
}
