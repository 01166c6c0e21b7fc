package pathtrust

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv"
)

const nobody = 65534

// TestCheck builds each layout for real (mkdir, chmod, chown) under
// t.TempDir, itself under /tmp (root's, sticky: excepted).
func TestCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to chown")
	}
	type step struct {
		path       string // relative to the test's directory
		mode       os.FileMode
		uid, gid   int
		file, link bool
		target     string // for link
	}
	cases := []struct {
		name      string
		layout    []step
		check     string
		ancestors bool
		trust     Trust
		wantIn    string // "" means accepted
	}{
		{"root's dir", []step{{path: "a", mode: 0o755}}, "a", false, Trust{}, ""},
		{"root's 0600 file", []step{{path: "a", mode: 0o700}, {path: "a/f", mode: 0o600, file: true}}, "a/f", false, Trust{}, ""},
		{"missing below root's", []step{{path: "a", mode: 0o755}}, "a/b/c", false, Trust{}, ""},
		{"dir of another user", []step{{path: "a", mode: 0o700, uid: nobody, gid: nobody}}, "a", false, Trust{}, "owned by nobody:nogroup with mode 0700"},
		{"dir of a trusted user", []step{{path: "a", mode: 0o700, uid: nobody, gid: nobody}}, "a", false, Trust{UIDs: []uint32{nobody}}, ""},
		{"ancestor of another user", []step{{path: "a", mode: 0o755, uid: nobody, gid: nobody}, {path: "a/b", mode: 0o700}}, "a/b", false, Trust{}, "its ancestor"},
		{"missing below another user's", []step{{path: "a", mode: 0o755, uid: nobody, gid: nobody}}, "a/b", false, Trust{}, "owned by nobody"},
		{"ancestors only: the path itself is not checked", []step{{path: "a", mode: 0o777, uid: nobody}}, "a", true, Trust{}, ""},
		{"ancestors only: its parent is", []step{{path: "a", mode: 0o777}, {path: "a/b", mode: 0o700}}, "a/b", true, Trust{}, "writable by others"},
		{"world-writable ancestor", []step{{path: "a", mode: 0o777}, {path: "a/b", mode: 0o700}}, "a/b", false, Trust{}, "mode 0777, writable by others"},
		{"sticky root ancestor like /tmp", []step{{path: "a", mode: os.ModeSticky | 0o777}, {path: "a/b", mode: 0o700}}, "a/b", false, Trust{}, ""},
		{"sticky dir itself", []step{{path: "a", mode: os.ModeSticky | 0o777}}, "a", false, Trust{}, "mode 1777, writable by others: use a directory of its own (inside it is fine), root's and writable by root alone"},
		{"world-writable dir itself", []step{{path: "a", mode: 0o777}}, "a", false, Trust{}, "mode 0777, writable by others: make it root's and writable by root alone"},
		{"sticky ancestor of another user", []step{{path: "a", mode: os.ModeSticky | 0o777, uid: nobody}, {path: "a/b", mode: 0o700}}, "a/b", false, Trust{}, "owned by nobody"},
		{"group-writable, group root", []step{{path: "a", mode: 0o775}}, "a", false, Trust{}, ""},
		{"group-writable, other group", []step{{path: "a", mode: 0o775, gid: nobody}}, "a", false, Trust{}, "writable by a group other than root's"},
		{"group-writable, trusted group", []step{{path: "a", mode: 0o775, gid: nobody}}, "a", false, Trust{GIDs: []uint32{nobody}}, ""},
		{"file readable by others is not this check's", []step{{path: "a", mode: 0o755}, {path: "a/f", mode: 0o644, file: true}}, "a/f", false, Trust{}, ""},
		{"file writable by others", []step{{path: "a", mode: 0o755}, {path: "a/f", mode: 0o666, file: true}}, "a/f", false, Trust{}, "a/f is owned by root:root with mode 0666"},
		{"symlink to another user's dir", []step{{path: "bad", mode: 0o755, uid: nobody}, {path: "bad/d", mode: 0o700}, {path: "good", mode: 0o755}, {path: "good/l", link: true, target: "../bad/d"}}, "good/l", false, Trust{}, "its ancestor"},
		{"symlink through a hop in another user's dir", []step{{path: "ok", mode: 0o755}, {path: "hop", mode: 0o755, uid: nobody}, {path: "hop/l2", link: true, target: "../ok"}, {path: "good", mode: 0o755}, {path: "good/l", link: true, target: "../hop/l2"}}, "good/l", false, Trust{}, "its ancestor"},
		{"dot-dot after a symlink follows the target", []step{{path: "bad", mode: 0o777}, {path: "bad/sub", mode: 0o755}, {path: "good", mode: 0o755}, {path: "good/l", link: true, target: "../bad/sub"}}, "good/l/../x", false, Trust{}, "bad is owned by root:root with mode 0777"},
		{"symlink to root's dir", []step{{path: "ok", mode: 0o755}, {path: "good", mode: 0o755}, {path: "good/l", link: true, target: "../ok"}}, "good/l/x", false, Trust{}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, s := range c.layout {
				p := filepath.Join(dir, s.path)
				var err error
				switch {
				case s.link:
					err = os.Symlink(s.target, p)
				case s.file:
					err = os.WriteFile(p, nil, 0o600)
				default:
					err = os.Mkdir(p, 0o700)
				}
				if err != nil {
					t.Fatal(err)
				}
				if s.link {
					continue
				}
				if err := os.Chmod(p, s.mode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(p, s.uid, s.gid); err != nil {
					t.Fatal(err)
				}
			}
			p := dir + "/" + c.check // not Join: "l/.." must reach Check as written
			err := Check("executor.data_dir", p, c.ancestors, c.trust)
			if c.wantIn == "" {
				if err != nil {
					t.Fatalf("Check(%s) = %v, want nil", c.check, err)
				}
				return
			}
			if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), c.wantIn) || !strings.Contains(err.Error(), "executor.data_dir "+p) {
				t.Fatalf("Check(%s) = %v; want ErrUntrusted naming executor.data_dir %s and %q", c.check, err, p, c.wantIn)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}
