package account

import (
	"bufio"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
)

// Profile is what a login gives a user's session: the variables HOME,
// USER, LOGNAME and SHELL come from it.
type Profile struct {
	// Name is the user name; the uid as a number when the user database
	// lists no name.
	Name string
	// Home is the home directory; "/" when the database lists none.
	Home string
	// Shell is the login shell (the seventh field of /etc/passwd);
	// "/bin/sh" when it lists none.
	Shell string
}

// LookupProfile returns the profile of name (a user name or a numeric
// uid); "" is the effective user running hbx. An unknown name is an error
// naming it; a numeric uid the database does not list gets its number as
// its name, "/" as its home and /bin/sh.
func LookupProfile(name string) (Profile, error) {
	if name == "" {
		name = strconv.Itoa(os.Geteuid())
	}
	var u *user.User
	var err error
	if _, perr := strconv.Atoi(name); perr == nil {
		u, err = user.LookupId(name)
		if err != nil {
			return Profile{Name: name, Home: "/", Shell: "/bin/sh"}, nil
		}
	} else if u, err = user.Lookup(name); err != nil {
		return Profile{}, fmt.Errorf("user %q: %w", name, err)
	}
	p := Profile{Name: u.Username, Home: u.HomeDir, Shell: passwdShell("/etc/passwd", u.Username)}
	if p.Home == "" {
		p.Home = "/"
	}
	return p, nil
}

// passwdShell returns the login shell the passwd file at path lists for
// name, "/bin/sh" when it lists none (os/user does not expose it).
func passwdShell(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return "/bin/sh"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) == 7 && fields[0] == name && fields[6] != "" {
			return fields[6]
		}
	}
	return "/bin/sh"
}
