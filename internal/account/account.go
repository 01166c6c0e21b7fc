// Package account turns a configured user name into the credential a child
// process runs with. It reads /etc/passwd and /etc/group through os/user
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
	var u *user.User
	var err error
	if _, perr := strconv.Atoi(name); perr == nil {
		u, err = user.LookupId(name)
	} else {
		u, err = user.Lookup(name)
	}
	if err != nil {
		return nil, fmt.Errorf("user %q: %w", name, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("user %q: uid %q is not numeric", name, u.Uid)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("user %q: gid %q is not numeric", name, u.Gid)
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
