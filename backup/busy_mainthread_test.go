package backup

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv"
)

// init lets the test binary become a process whose main thread exited
// (testenv.MainThreadExitsEnv), holding what it inherited.
func init() { testenv.ExitMainThreadIfAsked() }

// TestRefusesBusyDataDirMainThreadExited: a process whose main thread
// exited while another thread runs has no descriptors, working directory
// or mappings under /proc/PID (its zombie main thread's are gone); its
// threads have them. It holding a file (or its working directory) in the
// data directory stops the backup as any holder does; it used to be
// missed and the backup read a directory being written.
func TestRefusesBusyDataDirMainThreadExited(t *testing.T) {
	for _, how := range []string{"open file", "working directory"} {
		t.Run(how, func(t *testing.T) {
			b := newBox(t)
			write(t, b.data, "db 0600 x")
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), testenv.MainThreadExitsEnv+"=1", "GOMAXPROCS=4")
			cmd.Dir = t.TempDir()
			if how == "working directory" {
				cmd.Dir = b.data
			} else {
				f, err := os.Open(filepath.Join(b.data, "db"))
				must(t, err)
				defer f.Close()
				cmd.ExtraFiles = []*os.File{f}
			}
			must(t, cmd.Start())
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			if err := testenv.AwaitMainThreadExit(cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
			for _, f := range cmd.ExtraFiles {
				f.Close()
			}
			_, err := Create(context.Background(), b.options())
			if pid, _, ok := IsBusy(err); !ok || pid != cmd.Process.Pid || !errors.Is(err, ErrBusy) {
				t.Fatalf("Create() = %v, want busy naming pid %d, whose main thread exited", err, cmd.Process.Pid)
			}
		})
	}
}
