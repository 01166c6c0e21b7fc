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

func TestIDs(t *testing.T) {
	tests := []struct {
		name     string
		uid, gid int
		wantErr  string
	}{
		{"root", 0, 0, ""},
		{"0", 0, 0, ""},
		{"nobody", 65534, 65534, ""},
		{"4000123", 4000123, 4000123, ""}, // a numeric owner no user database lists
		{"no-such-user-hbx", 0, 0, `user "no-such-user-hbx"`},
	}
	for _, tt := range tests {
		uid, gid, err := IDs(tt.name)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("IDs(%q) = %d, %d, %v; want error containing %q", tt.name, uid, gid, err, tt.wantErr)
			}
			continue
		}
		if err != nil || uid != tt.uid || gid != tt.gid {
			t.Errorf("IDs(%q) = %d, %d, %v; want %d, %d", tt.name, uid, gid, err, tt.uid, tt.gid)
		}
	}
}

// TestNames: uid 0 and gid 0 are root in every user database hbx runs on;
// a uid no one has is not listed; Current names the real uid.
func TestNames(t *testing.T) {
	if n, ok := Name(0); !ok || n != "root" {
		t.Errorf("Name(0) = %q, %v; want root", n, ok)
	}
	if n, ok := GroupName(0); !ok || n != "root" {
		t.Errorf("GroupName(0) = %q, %v; want root", n, ok)
	}
	if n, ok := Name(1<<31 - 7); ok {
		t.Errorf("Name(unlisted) = %q, true", n)
	}
	if n, ok := GroupName(1<<31 - 7); ok {
		t.Errorf("GroupName(unlisted) = %q, true", n)
	}
	want := strconv.Itoa(os.Getuid())
	if n, ok := Name(os.Getuid()); ok {
		want = n
	}
	if got := Current(); got != want {
		t.Errorf("Current() = %q, want %q", got, want)
	}
}
