package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/pathtrust"
)

// TestBadLogPathRefusedBeforeTheInstall: a program's log path that
// openLog would refuse (a directory, a symbolic link, a FIFO, a
// directory others may write) ends Run with a StartError before the
// install on start runs, so the operator hears of it at once and not
// after a long install; nothing is created, nothing started. A log path
// whose directory does not exist yet passes the check (openLog makes
// it). Before, the log files were first opened after the install.
func TestBadLogPathRefusedBeforeTheInstall(t *testing.T) {
	for _, tc := range []struct {
		name   string
		plant  func(t *testing.T, path string) // path: the log file's
		wantIs error                           // nil: passes the check
		want   string
	}{
		{name: "directory", plant: func(t *testing.T, p string) {
			mustDo(t, os.Mkdir(p, 0o755))
		}, wantIs: ErrLogNotRegular, want: "log is not a regular file: a directory; remove it or log to another path"},
		{name: "symbolic link", plant: func(t *testing.T, p string) {
			mustDo(t, os.Symlink(filepath.Join(t.TempDir(), "elsewhere"), p))
		}, wantIs: ErrLogNotRegular, want: "a symbolic link, which hbx never follows; remove it"},
		{name: "FIFO", plant: func(t *testing.T, p string) {
			mustDo(t, syscall.Mkfifo(p, 0o600))
		}, wantIs: ErrLogNotRegular, want: "a FIFO, socket or device; remove it"},
		{name: "directory writable by others", plant: func(t *testing.T, p string) {
			mustDo(t, os.Chmod(filepath.Dir(p), 0o777))
		}, wantIs: pathtrust.ErrUntrusted, want: "writable by others"},
		{name: "regular file", plant: func(t *testing.T, p string) {
			mustDo(t, os.WriteFile(p, []byte("earlier\n"), 0o600))
		}},
		{name: "directory absent", plant: func(t *testing.T, p string) {
			mustDo(t, os.RemoveAll(filepath.Dir(p)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := helperProgram(t, progDir(t, "app"), "app", "sleep", "")
			app.Stdout.Path = filepath.Join(t.TempDir(), "logs", "app.out.log")
			mustDo(t, os.Mkdir(filepath.Dir(app.Stdout.Path), 0o755))
			tc.plant(t, app.Stdout.Path)
			installed := make(chan struct{}, 1)
			s, err := New(Options{
				Programs: []Program{app},
				Logger:   testLogger(t),
				Install: func(context.Context, func(string)) error {
					select {
					case installed <- struct{}{}:
					default:
					}
					return nil
				},
				InstallProgram: "app",
			})
			mustDo(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			runErr := make(chan error, 1)
			go func() { runErr <- s.Run(ctx) }()
			if tc.wantIs == nil {
				select {
				case <-installed:
				case err := <-runErr:
					t.Fatalf("Run() = %v before the install, want the log path to pass the check", err)
				case <-ctx.Done():
					t.Fatal("the install on start did not run within a minute")
				}
				s.Shutdown()
				<-runErr
				return
			}
			var err2 error
			select {
			case err2 = <-runErr:
			case <-ctx.Done():
				t.Fatal("Run() did not return within a minute")
			}
			if len(installed) != 0 {
				t.Errorf("the install on start ran before the bad log path was refused")
			}
			msg := ""
			if err2 != nil {
				msg = err2.Error()
			}
			if !IsStartError(err2) || !errors.Is(err2, tc.wantIs) || !strings.HasPrefix(msg, "program app: open log "+app.Stdout.Path+": ") || !strings.Contains(msg, tc.want) {
				t.Errorf("Run() = %v, want a StartError wrapping %v that names the program and path and says %q", err2, tc.wantIs, tc.want)
			}
			if fi, err := os.Lstat(app.Stdout.Path); err == nil && fi.Mode().IsRegular() {
				t.Errorf("%s was created as a log file", app.Stdout.Path)
			}
		})
	}
}

// mustDo fails the test on a set-up error.
func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
