package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/regfile"

	"github.com/hermesbox/hbx/internal/testenv"
)

// untrustedEntry makes, in dir (a directory the program's user controls),
// the entry kind names: "fifo", "symlink" (to a root-only file elsewhere
// that would pass the check), "device" (a character device, /dev/null's
// 1:3; root only, else skipped) or "socket". It returns its path.
func untrustedEntry(t *testing.T, dir, kind, content string) string {
	t.Helper()
	p := filepath.Join(dir, kind)
	var err error
	switch kind {
	case "fifo":
		err = unix.Mkfifo(p, 0o666)
	case "symlink":
		secret := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(secret, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		err = os.Symlink(secret, p)
	case "device":
		if os.Geteuid() != 0 {
			testenv.Missing(t, "needs root to mknod")
		}
		err = unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
	case "socket":
		err = unix.Mknod(p, unix.S_IFSOCK|0o666, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// within runs f and fails the test when it has not returned after a
// generous bound (a blocked open(2) never returns).
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still blocked after 10 s", what)
		return nil
	}
}

// TestReadyFileNotRegularNotReady: the Hermes state file (ready_file),
// read as root in a directory the hermes user controls, is a FIFO, a
// symlink to a root-only file that says "running", a device node or a
// socket: each answers at once "not ready: ... is not a regular file",
// nothing is followed and nothing blocks.
func TestReadyFileNotRegularNotReady(t *testing.T) {
	for _, kind := range []string{"fifo", "symlink", "device", "socket"} {
		t.Run(kind, func(t *testing.T) {
			p := untrustedEntry(t, t.TempDir(), kind, `{"gateway_state": "running"}`)
			r := Readiness{JSONFile: p, JSONField: "gateway_state", JSONValue: "running"}
			err := within(t, "readiness probe", func() error { return r.Probe().CheckProcess(context.Background(), os.Getpid()) })
			want := "state " + p + " is not a regular file"
			if !errors.Is(err, ErrNotReady) || err.Error() != want {
				t.Errorf("Probe(%s) = %v, want ErrNotReady %q", kind, err, want)
			}
		})
	}
}

// TestTailFileNotRegular: the log a program writes itself (log_file,
// hbx logs --file) is read as root in a directory the program's user
// controls: a FIFO, a symlink, a device or a socket there fails at once
// with regfile.ErrNotRegular, with or without following; one put there
// while following is skipped like an absent file, and stopping still
// works.
func TestTailFileNotRegular(t *testing.T) {
	for _, kind := range []string{"fifo", "symlink", "device", "socket"} {
		t.Run(kind, func(t *testing.T) {
			p := untrustedEntry(t, t.TempDir(), kind, "secret\n")
			for _, follow := range []bool{false, true} {
				stop := make(chan struct{})
				var c <-chan struct{}
				if follow {
					c = stop
				}
				var b strings.Builder
				err := within(t, "tailFile", func() error { return tailFile(p, 10, c, 10*time.Millisecond, &b, func() {}) })
				close(stop)
				if !errors.Is(err, regfile.ErrNotRegular) || b.Len() != 0 {
					t.Errorf("tailFile(%s, follow %v) = %q, %v; want nothing, ErrNotRegular", kind, follow, b.String(), err)
				}
			}
		})
	}
	t.Run("fifo while following", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "log")
		if err := os.WriteFile(p, []byte("a\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		done := make(chan error, 1)
		w := &firstWrite{c: make(chan struct{})}
		go func() { done <- tailFile(p, 10, stop, 10*time.Millisecond, w, func() {}) }()
		select {
		case <-w.c: // the regular file is open and read
		case <-time.After(10 * time.Second):
			t.Fatal("tailFile wrote nothing of the regular file in 10 s")
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mkfifo(p, 0o666); err != nil {
			t.Fatal(err)
		}
		// Let it poll the FIFO a few times: a blocking open would
		// never come back to see stop.
		time.Sleep(200 * time.Millisecond)
		close(stop)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("tailFile() = %v, want nil after stop", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("tailFile still blocked on a FIFO 10 s after stop")
		}
	})
}

// firstWrite is an io.Writer that closes c at its first write.
type firstWrite struct {
	c    chan struct{}
	once sync.Once
}

func (w *firstWrite) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.c) })
	return len(b), nil
}
