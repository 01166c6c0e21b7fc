package account

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestLookup(t *testing.T) {
	if c, err := Lookup(""); c != nil || err != nil {
		t.Errorf(`Lookup("") = %v, %v; want nil, nil`, c, err)
	}
	if c, err := Lookup(strconv.Itoa(os.Geteuid())); c != nil || err != nil {
		t.Errorf("Lookup(self) = %v, %v; want nil, nil (no switch)", c, err)
	}
	if _, err := Lookup("no-such-user-hbx"); err == nil || !strings.Contains(err.Error(), `user "no-such-user-hbx"`) {
		t.Errorf("Lookup(unknown) = %v, want an error naming the user", err)
	}
	if os.Geteuid() == 0 {
		c, err := Lookup("nobody")
		if err != nil || c == nil || c.Uid == 0 {
			t.Errorf("Lookup(nobody) as root = %+v, %v; want a non-root credential", c, err)
		}
	}
}
