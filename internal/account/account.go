// Package account turns a configured user name into the credential a child
// process runs with, and a uid or gid back into a name: hbx's one owner of
// user and group lookups. It reads /etc/passwd and /etc/group through os/user
// (pure Go with CGO_ENABLED=0: no NSS modules such as LDAP). It creates
// the dedicated system user Executor runs as by default through useradd(8)
// (EnsureSystemUser), never by writing those files itself.
package account

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrUnknownUser: the user database (/etc/passwd, through os/user) does
// not list the name or uid.
var ErrUnknownUser = errors.New("not in the user database")

// Lookup resolves name (a user name or a numeric uid) to the credential to
// switch to: uid, primary gid and supplementary groups. It returns nil when
// name is "" or the current effective user (no switch needed). Switching to
// another user needs root; otherwise, and for an unknown user, it errors
// naming the user.
func Lookup(name string) (*syscall.Credential, error) {
	if name == "" {
		return nil, nil
	}
	u, uid, gid, err := find(name)
	if err != nil {
		return nil, err
	}
	if uid == os.Geteuid() {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("user %q: running as another user needs root (hbx runs as uid %d)", name, os.Geteuid())
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("user %q: groups: %w", name, err)
	}
	for _, g := range gids {
		if n, err := strconv.Atoi(g); err == nil {
			cred.Groups = append(cred.Groups, uint32(n))
		}
	}
	return cred, nil
}

// IDs resolves name (a user name or a numeric uid) to its uid and primary
// gid. A numeric uid the user database does not list is taken as it is,
// with the same number as its gid (a file owner need not be a known user);
// an unknown name is an error naming it.
func IDs(name string) (uid, gid int, err error) {
	if n, perr := strconv.Atoi(name); perr == nil && n >= 0 {
		if _, err := user.LookupId(name); err != nil {
			return n, n, nil
		}
	}
	_, uid, gid, err = find(name)
	return uid, gid, err
}

// find looks name up as a numeric uid or a user name.
func find(name string) (u *user.User, uid, gid int, err error) {
	if _, perr := strconv.Atoi(name); perr == nil {
		u, err = user.LookupId(name)
	} else {
		u, err = user.Lookup(name)
	}
	var unknownName user.UnknownUserError
	var unknownID user.UnknownUserIdError
	switch {
	case errors.As(err, &unknownName), errors.As(err, &unknownID):
		return nil, 0, 0, fmt.Errorf("user %q: %w", name, ErrUnknownUser)
	case err != nil:
		return nil, 0, 0, fmt.Errorf("user %q: %w", name, err)
	}
	if uid, err = strconv.Atoi(u.Uid); err != nil {
		return nil, 0, 0, fmt.Errorf("user %q: uid %q is not numeric", name, u.Uid)
	}
	if gid, err = strconv.Atoi(u.Gid); err != nil {
		return nil, 0, 0, fmt.Errorf("user %q: gid %q is not numeric", name, u.Gid)
	}
	return u, uid, gid, nil
}

// Name returns the user name the user database lists for uid; false when
// it lists none.
func Name(uid int) (string, bool) {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return "", false
	}
	return u.Username, true
}

// GroupName returns the group name the group database lists for gid;
// false when it lists none.
func GroupName(gid int) (string, bool) {
	g, err := user.LookupGroupId(strconv.Itoa(gid))
	if err != nil {
		return "", false
	}
	return g.Name, true
}

// Current names the user running hbx (user.Current: the real uid), or
// that uid as a number when the user database has no name for it.
func Current() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

// Dedicated is the unprivileged system user Executor runs as by default
// when hbx runs as root (executor.user), the user deploy/Dockerfile
// creates. hbx creates it when it is missing (EnsureSystemUser).
const Dedicated = "executor"

// Default is executor.user's default: Dedicated when hbx runs as root (tool
// code that Executor runs and that breaks out would own the box as root),
// else the user running hbx (Current), which cannot switch to another.
func Default() string {
	if os.Geteuid() == 0 {
		return Dedicated
	}
	return Current()
}

// ErrNoUseradd: a system user must be created and useradd(8) is not
// installed.
var ErrNoUseradd = errors.New("useradd not found")

// EnsureSystemUser creates name as a system user with a group of its own,
// no home directory and no login shell (useradd --system --user-group
// --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin, as
// deploy/Dockerfile does) when the user database lists no such user;
// created says whether it did. useradd, not hbx, writes the entries: it
// takes the lock other tools of the shadow suite take on /etc/passwd,
// /etc/shadow, /etc/group and /etc/gshadow, writes all four, and picks the
// uid and gid from login.defs' system range. Without useradd (ErrNoUseradd)
// or when it fails, the error names name and what to do. A second copy
// racing this one is fine: when useradd fails and the user exists after
// all, that is success (created false).
func EnsureSystemUser(ctx context.Context, name string) (created bool, err error) {
	if _, _, _, err := find(name); err == nil {
		return false, nil
	}
	if os.Geteuid() != 0 {
		return false, fmt.Errorf("user %q does not exist, and creating it needs root (hbx runs as uid %d)", name, os.Geteuid())
	}
	bin, err := useradd()
	if err != nil {
		return false, fmt.Errorf("user %q does not exist: create it (a system user), or set executor.user to an existing one: %w", name, err)
	}
	cmd := exec.CommandContext(ctx, bin, "--system", "--user-group", "--home-dir", "/nonexistent", "--no-create-home", "--shell", "/usr/sbin/nologin", "--", name)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	out, rerr := cmd.CombinedOutput()
	if _, _, _, err := find(name); err == nil {
		return rerr == nil, nil
	}
	return false, fmt.Errorf("create system user %q: %s: %w: %s", name, bin, rerr, strings.TrimSpace(string(out)))
}

// useraddDirs are where useradd finds useradd(8), in order; tests change it.
var useraddDirs = []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"}

// useradd finds useradd(8) in the system directories, never through the
// caller's PATH (hbx runs it as root).
func useradd() (string, error) {
	for _, d := range useraddDirs {
		p := filepath.Join(d, "useradd")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w in /usr/sbin, /sbin, /usr/bin or /bin", ErrNoUseradd)
}
