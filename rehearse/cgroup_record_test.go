package rehearse

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/progcgroup"
	"github.com/hermesbox/hbx/internal/testenv"
)

// inCgroup starts sleep in a new cgroup at path (made here) and returns
// it; the test kills it at its end.
func inCgroup(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(d.Fd())}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	return cmd
}

// TestForgedCgroupRecordKillsNothing: the scratch directory is the
// payload's user's once the payload runs, so the cgroup record the next
// rehearsal reads there (CgroupRecord) may have been replaced. Only a
// record hbx could have written (this user's regular file with one name)
// naming a rehearsal cgroup of this data directory below the cgroup v2
// mount has its processes killed and its cgroup removed: a symbolic or
// hard link to such a record, a FIFO (which must not block the read), a
// directory, another user's file, or a record naming another data
// directory's rehearsal cgroup, a cgroup not named like one, or a path
// leaving the mount by "..", kills nothing and removes nothing. The
// first case (hbx's own record) proves the test sees a kill.
func TestForgedCgroupRecordKillsNothing(t *testing.T) {
	requireCgroups(t)
	for _, tc := range []struct {
		name string
		// target: the cgroup the record aims at, below the test's
		// cgroup base; plant writes the record in scratch dir s.
		target     func(data string) string
		plant      func(t *testing.T, s, record string)
		wantKilled bool
	}{
		{name: "hbx's own record", target: ownTarget, plant: plainRecord, wantKilled: true},
		{name: "a symbolic link to a record", target: ownTarget, plant: func(t *testing.T, s, record string) {
			other := filepath.Join(t.TempDir(), "record")
			writeRecord(t, other, record)
			if err := os.Symlink(other, filepath.Join(s, CgroupRecord)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a hard link to a record", target: ownTarget, plant: func(t *testing.T, s, record string) {
			plainRecord(t, s, record)
			if err := os.Link(filepath.Join(s, CgroupRecord), filepath.Join(s, "planted")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a FIFO", target: ownTarget, plant: func(t *testing.T, s, _ string) {
			if err := syscall.Mkfifo(filepath.Join(s, CgroupRecord), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a directory", target: ownTarget, plant: func(t *testing.T, s, _ string) {
			if err := os.Mkdir(filepath.Join(s, CgroupRecord), 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "another user's file", target: ownTarget, plant: func(t *testing.T, s, record string) {
			plainRecord(t, s, record)
			if err := os.Chown(filepath.Join(s, CgroupRecord), os.Geteuid()+1, -1); err != nil {
				testenv.Missing(t, "needs root to chown the record to another user: "+err.Error())
			}
		}},
		{name: "another data directory's rehearsal cgroup", target: func(data string) string {
			return filepath.Join(progcgroup.Subtree(cgroupID(data+"-other")), cgroupLeaf)
		}, plant: plainRecord},
		{name: "a cgroup not named rehearsal", target: func(data string) string {
			return filepath.Join(progcgroup.Subtree(cgroupID(data)), "executor")
		}, plant: plainRecord},
		{name: "the rehearsal subtree itself", target: func(data string) string {
			return progcgroup.Subtree(cgroupID(data))
		}, plant: plainRecord},
		{name: "a path leaving the mount by ..", target: ownTarget, plant: func(t *testing.T, s, record string) {
			mount := progcgroup.Mount("/proc/self/mountinfo")
			rel, _ := filepath.Rel(mount, record)
			writeRecord(t, filepath.Join(s, CgroupRecord), mount+"/../x/"+rel)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(data, 0o700); err != nil {
				t.Fatal(err)
			}
			cg := testCgroup(t)
			target := filepath.Join(cg.Name(), tc.target(data))
			victim := inCgroup(t, target)
			s, err := newScratch(data)
			if err != nil {
				t.Fatal(err)
			}
			s.held.Close() // what hbx killed with SIGKILL left
			s.held = nil
			tc.plant(t, s.dir, target)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			gone, _, err := removeLeftovers(ctx, data, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("removeLeftovers: %v", err)
			}
			if len(gone) != 1 {
				t.Errorf("removeLeftovers removed %q, want the scratch directory %s", gone, s.dir)
			}
			_, statErr := os.Stat(target)
			if killed := !alive(victim); killed != tc.wantKilled {
				t.Errorf("the process in %s killed = %v, want %v", target, killed, tc.wantKilled)
			}
			if removed := statErr != nil; removed != tc.wantKilled {
				t.Errorf("cgroup %s removed = %v (Stat: %v), want %v", target, removed, statErr, tc.wantKilled)
			}
		})
	}
}

// ownTarget is where a rehearsal of data runs below its hbx's cgroup.
func ownTarget(data string) string {
	return filepath.Join(progcgroup.Subtree(cgroupID(data)), cgroupLeaf)
}

// plainRecord writes the record as hbx does.
func plainRecord(t *testing.T, s, record string) {
	t.Helper()
	writeRecord(t, filepath.Join(s, CgroupRecord), record)
}

func writeRecord(t *testing.T, path, record string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(record+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// init lets the test binary become a process whose main thread exited
// (testenv.MainThreadExitsEnv).
func init() { testenv.ExitMainThreadIfAsked() }

// TestCgroupStopKillsAProcessWhoseMainThreadExited: a process of the
// rehearsal whose main thread exited while another runs reads as a
// zombie in /proc/PID/stat, but it runs, holds the cgroup populated and
// is listed in cgroup.procs. The stop of a leftover cgroup kills it and
// removes the cgroup (it used to skip it as dead, then fail to remove
// the busy cgroup, the process left running).
func TestCgroupStopKillsAProcessWhoseMainThreadExited(t *testing.T) {
	requireCgroups(t)
	cg := testCgroup(t)
	path := filepath.Join(cg.Name(), progcgroup.Subtree("leaderexits"), cgroupLeaf)
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), testenv.MainThreadExitsEnv+"=1", "GOMAXPROCS=4")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(d.Fd())}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	if err := testenv.AwaitMainThreadExit(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := stopLeftover(ctx, &cgroup{path: path}, slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("stopLeftover: %v", err)
	}
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Errorf("process %d, its main thread exited, outlives the stop of its cgroup", cmd.Process.Pid)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup %s left: %v", path, err)
	}
}
