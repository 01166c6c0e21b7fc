package pathtrust

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/testenv"
)

// The ACL xattr layout, spelled out here so the test needs nothing of
// the code it tests.
const (
	tACLXattr = "system.posix_acl_access"
	tACLUser  = 0x02
	tACLGroup = 0x08
	tACLMask  = 0x10
)

// setACL writes an access ACL on p: the owner rwx, the owning group r-x,
// others r-x, the named users and groups with perm, and mask.
func setACL(t *testing.T, p string, users, groups []uint32, perm, mask uint16) {
	t.Helper()
	b := binary.LittleEndian.AppendUint32(nil, 2)
	add := func(tag, perm uint16, id uint32) {
		b = binary.LittleEndian.AppendUint16(b, tag)
		b = binary.LittleEndian.AppendUint16(b, perm)
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	const undefined = 0xffffffff
	add(0x01, 7, undefined) // ACL_USER_OBJ
	for _, u := range users {
		add(tACLUser, perm, u)
	}
	add(0x04, 5, undefined) // ACL_GROUP_OBJ
	for _, g := range groups {
		add(tACLGroup, perm, g)
	}
	add(tACLMask, mask, undefined)
	add(0x20, 5, undefined) // ACL_OTHER
	if err := unix.Setxattr(p, tACLXattr, b, 0); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			// Not a missing prerequisite: a property of the test file system.
			t.Skipf("the file system of %s has no ACLs", p)
		}
		t.Fatal(err)
	}
}

// TestCheckACL: a root-owned 0775 directory whose ACL lets another user
// write (setfacl -m u:hermes:rwx) is refused, and the test shows that user
// really can create a file in it (a real process as nobody); a mask
// without write, or a trusted user in the ACL, is accepted.
func TestCheckACL(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to run as nobody")
	}
	cases := []struct {
		name          string
		users, groups []uint32
		perm, mask    uint16
		trust         Trust
		wantIn        string // "" means accepted
		nobodyWrites  bool
	}{
		{"named user may write", []uint32{nobody}, nil, 7, 7, Trust{}, "its ACL lets user nobody write", true},
		{"named group may write", nil, []uint32{nobody}, 7, 7, Trust{}, "its ACL lets group nogroup write", true},
		{"mask takes write away", []uint32{nobody}, nil, 7, 5, Trust{}, "", false},
		{"named user reads only", []uint32{nobody}, nil, 5, 7, Trust{}, "", false},
		{"named user is trusted", []uint32{nobody}, nil, 7, 7, Trust{UIDs: []uint32{nobody}}, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range []string{dir, filepath.Dir(dir)} {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			storage := filepath.Join(dir, "storage")
			if err := os.Mkdir(storage, 0o755); err != nil {
				t.Fatal(err)
			}
			setACL(t, storage, c.users, c.groups, c.perm, c.mask)
			cmd := exec.Command("/bin/sh", "-c", "echo x > "+storage+"/planted")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
			out, err := cmd.CombinedOutput()
			if wrote := err == nil; wrote != c.nobodyWrites {
				t.Fatalf("nobody wrote in the directory: %v, want %v (%v: %s)", wrote, c.nobodyWrites, err, out)
			}
			err = Check("executor.runtime_dir", storage+"/executor-runtime", false, c.trust)
			if c.wantIn == "" {
				if err != nil {
					t.Fatalf("Check() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), c.wantIn) || !strings.Contains(err.Error(), "its ancestor "+storage) {
				t.Fatalf("Check() = %v; want ErrUntrusted naming its ancestor %s and %q", err, storage, c.wantIn)
			}
		})
	}
}
