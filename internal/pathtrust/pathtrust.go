package pathtrust

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/account"
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
	// Not filepath.Abs: it cleans "l/.." lexically, where the kernel
	// goes to the parent of l's target.
	abs := p
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("check %s %s: %w", what, p, err)
		}
		abs = wd + "/" + p
	}
	// Resolve as the kernel does, one component at a time: cur is always a
	// real directory (no symlink in it), and each symlink met puts its
	// target's components in front of what is left, so the directories
	// of every hop are checked too.
	cur := "/"
	todo := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	if err := checkOne(what, p, cur, allEmpty(todo), ancestorsOnly, t); err != nil || allEmpty(todo) {
		return err
	}
	for hops := 0; len(todo) > 0; {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		st, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // what is missing hbx creates, root's
		}
		if err != nil {
			return fmt.Errorf("check %s %s: %w", what, p, err)
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			if hops++; hops > 40 {
				return fmt.Errorf("check %s %s: too many levels of symbolic links", what, p)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return fmt.Errorf("check %s %s: %w", what, p, err)
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		self := len(todo) == 0 || allEmpty(todo)
		if err := checkInfo(what, p, next, st, self, ancestorsOnly, t); err != nil {
			return err
		}
		cur = next
	}
	return nil
}

// allEmpty reports whether the components left name nothing more (a
// trailing slash).
func allEmpty(todo []string) bool {
	for _, c := range todo {
		if c != "" && c != "." {
			return false
		}
	}
	return true
}

// checkOne checks the existing directory c.
func checkOne(what, p, c string, self, ancestorsOnly bool, t Trust) error {
	st, err := os.Lstat(c)
	if err != nil {
		return fmt.Errorf("check %s %s: %w", what, p, err)
	}
	return checkInfo(what, p, c, st, self, ancestorsOnly, t)
}

// checkInfo refuses component c (st) of p when an untrusted user may
// write it.
func checkInfo(what, p, c string, st fs.FileInfo, self, ancestorsOnly bool, t Trust) error {
	if self && ancestorsOnly {
		return nil
	}
	why := untrusted(st, self, t)
	if why == "" {
		why = aclWriter(c, t)
	}
	if why == "" {
		return nil
	}
	sys := st.Sys().(*syscall.Stat_t)
	where := c
	if !self {
		where = "its ancestor " + c
	}
	return fmt.Errorf("%w: %s %s: %s is owned by %s:%s with mode %04o, %s: %s",
		ErrUntrusted, what, p, where, userName(sys.Uid), groupName(sys.Gid), permBits(st.Mode()), why, fixFor(st, self, os.Geteuid()))
}

// fixFor says what to do about component st refused for a run of hbx as
// euid. A run as neither root nor the component's owner trusts only root
// and itself, so a directory the box gave executor.user looks untrusted to
// it: the fix is to run hbx as root, not to chown the box's own
// directories (which would break the payload).
func fixFor(st fs.FileInfo, self bool, euid int) string {
	sys := st.Sys().(*syscall.Stat_t)
	switch {
	case euid != 0 && sys.Uid != 0 && sys.Uid != uint32(euid):
		return fmt.Sprintf("run hbx as root (it runs as uid %d and trusts only root's paths and its own)", euid)
	case self && st.IsDir() && st.Mode()&fs.ModeSticky != 0 && sys.Uid == 0 && st.Mode().Perm()&0o002 != 0:
		// A shared directory such as /tmp itself: chmod would break it.
		return "use a directory of its own (inside it is fine), root's and writable by root alone"
	}
	return "make it root's and writable by root alone"
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

// POSIX ACL xattr layout (linux/posix_acl_xattr.h): a 4-byte version,
// then 8-byte entries of tag (u16), permissions (u16) and id (u32).
const (
	aclXattr   = "system.posix_acl_access"
	aclVersion = 2
	aclUser    = 0x02 // ACL_USER: a named user
	aclGroup   = 0x08 // ACL_GROUP: a named group
	aclMask    = 0x10 // ACL_MASK: bounds named entries and the owning group
	aclWrite   = 0x02
)

// aclWriter says which untrusted user or group c's access ACL lets write
// c, or "" when none does (or c has no ACL, or its file system cannot
// report one).
// The mode bits alone do not show it: with an ACL the group bits are its
// mask, so "setfacl -m u:hermes:rwx /storage" leaves a 0775 root:root
// directory that hermes can write.
func aclWriter(c string, t Trust) string {
	buf := make([]byte, 512)
	var n int
	for {
		var err error
		n, err = unix.Lgetxattr(c, aclXattr, buf)
		if errors.Is(err, unix.ERANGE) && len(buf) < 1<<20 {
			buf = make([]byte, 4*len(buf))
			continue
		}
		if err != nil {
			// No ACL (ENODATA), none on this file system (EOPNOTSUPP), or
			// one that cannot say (FUSE, /proc): the mode bits decide.
			return ""
		}
		break
	}
	b := buf[:n]
	if len(b) < 4 || binary.LittleEndian.Uint32(b) != aclVersion || (len(b)-4)%8 != 0 {
		return fmt.Sprintf("an ACL hbx cannot read (%d bytes)", len(b))
	}
	type entry struct {
		tag, perm uint16
		id        uint32
	}
	var named []entry
	maskWrite := true // no mask entry: named entries are not bounded
	for e := b[4:]; len(e) > 0; e = e[8:] {
		x := entry{binary.LittleEndian.Uint16(e), binary.LittleEndian.Uint16(e[2:]), binary.LittleEndian.Uint32(e[4:])}
		switch x.tag {
		case aclMask:
			maskWrite = x.perm&aclWrite != 0
		case aclUser, aclGroup:
			named = append(named, x)
		}
	}
	if !maskWrite {
		return ""
	}
	for _, x := range named {
		if x.perm&aclWrite == 0 {
			continue
		}
		if x.tag == aclUser && x.id != 0 && !slices.Contains(t.UIDs, x.id) {
			return fmt.Sprintf("its ACL lets user %s write", userName(x.id))
		}
		if x.tag == aclGroup && x.id != 0 && !slices.Contains(t.GIDs, x.id) {
			return fmt.Sprintf("its ACL lets group %s write", groupName(x.id))
		}
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

// userName is uid's user name, or the number when none is listed.
func userName(uid uint32) string {
	if name, ok := account.Name(int(uid)); ok {
		return name
	}
	return strconv.Itoa(int(uid))
}

// groupName is gid's group name, or the number when none is listed.
func groupName(gid uint32) string {
	if name, ok := account.GroupName(int(gid)); ok {
		return name
	}
	return strconv.Itoa(int(gid))
}
