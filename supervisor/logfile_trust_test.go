package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/pathtrust"
	"github.com/hermesbox/hbx/internal/testenv"
)

// otherUID owns what another user planted (nobody's uid on Debian).
const otherUID = 65534

// TestLogFilesOpenedSafely: the supervisor, as root, refuses to open a
// program's log in a directory another user controls (owned by them,
// writable by others, reached through their symlink) and never follows a
// symbolic link planted as the log file itself, rotated or not: Run
// fails with one line naming the path and the rule, and the file the link
// points to is left as it was.
func TestLogFilesOpenedSafely(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to chown a directory to another user")
	}
	for _, tc := range []struct {
		name string
		// plant makes the layout in base and returns the log path.
		plant    func(t *testing.T, base, target string) string
		maxBytes int64
		want     []string
		wantIs   error
	}{
		{
			name: "dir owned by another uid",
			plant: func(t *testing.T, base, target string) string {
				d := mkdirOwned(t, filepath.Join(base, "logs"), 0o755, otherUID)
				return filepath.Join(d, "p.out.log")
			},
			want:   []string{"log directory", "an owner hbx does not trust there", "make it root's and writable by root alone"},
			wantIs: pathtrust.ErrUntrusted,
		},
		{
			name: "dir writable by others",
			plant: func(t *testing.T, base, target string) string {
				d := mkdirOwned(t, filepath.Join(base, "logs"), 0o777, 0)
				return filepath.Join(d, "p.out.log")
			},
			want:   []string{"log directory", "writable by others"},
			wantIs: pathtrust.ErrUntrusted,
		},
		{
			name: "ancestor owned by another uid",
			plant: func(t *testing.T, base, target string) string {
				d := mkdirOwned(t, filepath.Join(base, "home"), 0o755, otherUID)
				return filepath.Join(mkdirOwned(t, filepath.Join(d, "logs"), 0o755, 0), "p.out.log")
			},
			want:   []string{"its ancestor ", "an owner hbx does not trust there"},
			wantIs: pathtrust.ErrUntrusted,
		},
		{
			name: "dir is another user's symlink to their dir",
			plant: func(t *testing.T, base, target string) string {
				theirs := mkdirOwned(t, filepath.Join(base, "theirs"), 0o755, otherUID)
				link := filepath.Join(base, "logs")
				symlinkOwned(t, theirs, link, otherUID)
				return filepath.Join(link, "p.out.log")
			},
			want:   []string{"an owner hbx does not trust there"},
			wantIs: pathtrust.ErrUntrusted,
		},
		{
			name: "log file is a planted symlink",
			plant: func(t *testing.T, base, target string) string {
				p := filepath.Join(mkdirOwned(t, filepath.Join(base, "logs"), 0o755, 0), "p.out.log")
				symlinkOwned(t, target, p, otherUID)
				return p
			},
			want:   []string{"a symbolic link, which hbx never follows; remove it"},
			wantIs: ErrLogNotRegular,
		},
		{
			name: "rotated log file is a planted symlink",
			plant: func(t *testing.T, base, target string) string {
				p := filepath.Join(mkdirOwned(t, filepath.Join(base, "logs"), 0o755, 0), "p.out.log")
				symlinkOwned(t, target, p, otherUID)
				return p
			},
			maxBytes: 1 << 20,
			want:     []string{"a symbolic link, which hbx never follows; remove it"},
			wantIs:   ErrLogNotRegular,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			target := filepath.Join(t.TempDir(), "shadow")
			if err := os.WriteFile(target, []byte("root's\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			dir := progDir(t, "p")
			p := shProgram(t, dir, "p", `echo written; exec sleep 1000`)
			p.Stdout = LogFile{Path: tc.plant(t, base, target), MaxBytes: tc.maxBytes}
			s, err := New(Options{Programs: []Program{p}, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = s.Run(ctx)
			if err == nil || !IsStartError(err) || !errors.Is(err, tc.wantIs) {
				t.Fatalf("Run() = %v, want a StartError wrapping %v", err, tc.wantIs)
			}
			msg := err.Error()
			want := append([]string{"program p: open log " + p.Stdout.Path + ": "}, tc.want...)
			for _, w := range want {
				if !strings.Contains(msg, w) {
					t.Errorf("Run() = %q, want it to say %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("Run() = %q, want one line", msg)
			}
			if b, err := os.ReadFile(target); err != nil || string(b) != "root's\n" {
				t.Errorf("link target = %q, %v; want it untouched", b, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "starts")); err == nil {
				t.Errorf("the program started beside a refused log")
			}
		})
	}
}

// TestLogReopenRefusesPlantedSymlink: a symbolic link put in place of a
// log file while the supervisor runs is refused when the logs are
// reopened (SIGHUP after logrotate), never followed.
func TestLogReopenRefusesPlantedSymlink(t *testing.T) {
	dir := progDir(t, "p")
	p := shProgram(t, dir, "p", `exec sleep 1000`)
	var s *Supervisor
	runSupervisor(t, Options{Programs: []Program{p}}, &s)
	waitState(t, s, "p", 30*time.Second, Running)
	target := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(target, []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p.Stdout.Path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p.Stdout.Path); err != nil {
		t.Fatal(err)
	}
	_, err := s.reopenLogs()
	if !errors.Is(err, ErrLogNotRegular) {
		t.Errorf("reopenLogs() = %v, want ErrLogNotRegular", err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "root's\n" {
		t.Errorf("link target = %q, %v; want it untouched", b, err)
	}
}

// mkdirOwned makes directory p with mode perm, owned by uid.
func mkdirOwned(t *testing.T, p string, perm os.FileMode, uid int) string {
	t.Helper()
	if err := os.Mkdir(p, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := os.Chown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
	return p
}

// symlinkOwned makes link point to target, owned by uid (as if that user
// planted it).
func symlinkOwned(t *testing.T, target, link string, uid int) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, uid, uid); err != nil {
		t.Fatal(err)
	}
}
