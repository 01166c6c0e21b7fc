package account

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv"
)

func TestLookup(t *testing.T) {
	if c, err := Lookup(""); c != nil || err != nil {
		t.Errorf(`Lookup("") = %v, %v; want nil, nil`, c, err)
	}
	if c, err := Lookup(strconv.Itoa(os.Geteuid())); c != nil || err != nil {
		t.Errorf("Lookup(self) = %v, %v; want nil, nil (no switch)", c, err)
	}
	for _, name := range []string{"no-such-user-hbx", "4000123"} {
		want := `user "` + name + `": not in the user database`
		if _, err := Lookup(name); err == nil || err.Error() != want || !errors.Is(err, ErrUnknownUser) {
			t.Errorf("Lookup(%q) = %v, want %q (ErrUnknownUser)", name, err, want)
		}
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

// TestEnsureSystemUser: a missing user is created with the real useradd
// as a system user (uid below 1000, a group of its own, no login shell);
// two racing calls leave one entry; a second call finds it and creates nothing; a
// name useradd refuses and a machine without useradd fail naming the user.
func TestEnsureSystemUser(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "creating a system user needs root")
	}
	if _, err := useradd(); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	name := fmt.Sprintf("hbxt%d", os.Getpid()%1000000)
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	ctx := context.Background()
	var wg sync.WaitGroup
	created := make([]bool, 2)
	for i := range created {
		wg.Go(func() {
			c, err := EnsureSystemUser(ctx, name)
			if err != nil {
				t.Errorf("EnsureSystemUser(%q) = %v", name, err)
			}
			created[i] = c
		})
	}
	wg.Wait()
	if !created[0] && !created[1] {
		t.Errorf("two racing EnsureSystemUser() created = %v; want one true at least", created)
	}
	for _, db := range []string{"/etc/passwd", "/etc/group"} {
		b, err := os.ReadFile(db)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count("\n"+string(b), "\n"+name+":"); n != 1 {
			t.Errorf("%s lists %q %d times after two racing EnsureSystemUser(), want once", db, name, n)
		}
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("user.Lookup(%q) after EnsureSystemUser = %v", name, err)
	}
	if uid, _ := strconv.Atoi(u.Uid); uid == 0 || uid >= 1000 {
		t.Errorf("uid of the created user = %d, want a system uid (1-999)", uid)
	}
	if g, err := user.LookupGroupId(u.Gid); err != nil || g.Name != name {
		t.Errorf("primary group of the created user = %v, %v; want a group %q of its own", g, err, name)
	}
	if c, err := EnsureSystemUser(ctx, name); c || err != nil {
		t.Errorf("EnsureSystemUser(existing) = %v, %v; want false, nil", c, err)
	}
	if _, err := EnsureSystemUser(ctx, "Bad Name"); err == nil || !strings.Contains(err.Error(), `create system user "Bad Name"`) {
		t.Errorf("EnsureSystemUser(bad name) = %v, want useradd's refusal naming it", err)
	}
	useraddDirs = []string{t.TempDir()}
	t.Cleanup(func() { useraddDirs = []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} })
	if _, err := EnsureSystemUser(ctx, name+"x"); !errors.Is(err, ErrNoUseradd) || !strings.Contains(err.Error(), "set executor.user") {
		t.Errorf("EnsureSystemUser(no useradd) = %v, want ErrNoUseradd with the fix", err)
	}
}

// TestDefault: as root executor.user defaults to the dedicated user, else
// to the caller.
func TestDefault(t *testing.T) {
	want := Current()
	if os.Geteuid() == 0 {
		want = Dedicated
	}
	if got := Default(); got != want {
		t.Errorf("Default() = %q, want %q", got, want)
	}
}
