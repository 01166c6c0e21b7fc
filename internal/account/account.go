// Package account turns a configured user name into the credential a child
// process runs with, and a uid or gid back into a name: hbx's one owner of
// user and group lookups. It reads /etc/passwd and /etc/group through os/user
// (pure Go with CGO_ENABLED=0: no NSS modules such as LDAP).
package account

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

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
	if err != nil {
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
