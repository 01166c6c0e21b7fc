package backup

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestRefusesBusyDataDirHolderWithoutDescriptors: a single-threaded
// process that has no descriptor open at all (its /proc/PID/fd lists
// nothing) but its working directory in the data directory stops the
// backup as any holder does. procscan.Dirs took an empty descriptor
// table for a main thread that exited and read only the (absent) other
// threads: such a process was missed, its working directory and mappings
// never read.
func TestRefusesBusyDataDirHolderWithoutDescriptors(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "db 0600 x")
	// Every descriptor closed, those inherited past the standard ones too.
	cmd := exec.Command("/bin/bash", "-c", `for f in /proc/$$/fd/*; do eval "exec ${f##*/}>&-"; done; exec sleep 1000`)
	cmd.Dir = b.data
	must(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	fdDir := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/fd"
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm")
		fds, err := os.ReadDir(fdDir)
		if string(comm) == "sleep\n" && err == nil && len(fds) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d: not a sleep with no descriptor (comm %q, %d fds, %v)", cmd.Process.Pid, comm, len(fds), err)
		}
	}
	_, err := Create(context.Background(), b.options())
	if pid, _, ok := IsBusy(err); !ok || pid != cmd.Process.Pid || !errors.Is(err, ErrBusy) {
		t.Fatalf("Create() = %v, want busy naming pid %d, whose working directory is the data directory", err, cmd.Process.Pid)
	}
}
