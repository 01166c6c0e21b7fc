package rehearse

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/testenv"
)

// holderEnv makes the test binary a second copy of hbx in the middle of
// a rehearsal of the data directory it names: it holds the rehearsal
// lock and a scratch directory (its held file open), prints the scratch
// directory's path and waits until killed.
const holderEnv = "HBXTEST_REHEARSE_HOLDER"

func init() {
	if d := os.Getenv(holderEnv); d != "" && os.Getenv(payloadEnv) == "" && os.Getenv(escapeeEnv) == "" {
		l, err := lock.Acquire(context.Background(), datadir.RehearsalLock(d), "hbx upgrade (rehearsal)", 0, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "holder:", err)
			os.Exit(2)
		}
		s, err := newScratch(d)
		if err != nil {
			fmt.Fprintln(os.Stderr, "holder:", err)
			os.Exit(2)
		}
		fmt.Println(s.dir)
		_, _ = io.Copy(io.Discard, os.Stdin) // until killed (or stdin closed)
		_ = l.Unlock()
		os.Exit(0)
	}
}

// killedScratch lays out what a rehearsal killed with -9 leaves: its
// scratch directory (held file, cgroup record, a copy of the data with
// nested directories, a state directory), nobody holding its held file.
func killedScratch(t *testing.T, data string) string {
	t.Helper()
	s, err := newScratch(data)
	if err != nil {
		t.Fatal(err)
	}
	s.held.Close()
	writeTree(t, s.data(), map[string]string{"data.db": "db", "data.db-wal": "wal", "keys/secret.key": "k", "keys/auth-secret.key": "a"}, nil)
	writeTree(t, s.state(), map[string]string{"home/.cache/x": "x", "executor.pid": "1"}, nil)
	if err := os.WriteFile(filepath.Join(s.dir, CgroupRecord), []byte("/nonexistent/hbx.0/rehearsal\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return s.dir
}

// TestLeftoverRemovedWhereverItsRemovalWasKilled: a rehearsal's scratch
// directory whose removal a kill -9 stopped at any point (each window of
// removeScratchTree's order, simulated by removing what it had removed
// by then) is removed by the next rehearsal: the held file goes last,
// after data/ and state/, and an empty scratch directory (killed after
// the held file) is removed too.
func TestLeftoverRemovedWhereverItsRemovalWasKilled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		removed []string // what the killed removal had removed, relative to the scratch directory
	}{
		{name: "killed before it removed anything"},
		{name: "killed inside data/", removed: []string{"data/data.db", "data/keys/secret.key"}},
		{name: "killed inside state/", removed: []string{"data", "state/home"}},
		{name: "killed after data/ and state/", removed: []string{"data", "state"}},
		{name: "killed after the cgroup record", removed: []string{"data", "state", CgroupRecord}},
		{name: "killed after the held file", removed: []string{"data", "state", CgroupRecord, HeldFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(data, 0o700); err != nil {
				t.Fatal(err)
			}
			dir := killedScratch(t, data)
			for _, r := range tc.removed {
				if err := os.RemoveAll(filepath.Join(dir, r)); err != nil {
					t.Fatal(err)
				}
			}
			gone, left, err := removeLeftovers(context.Background(), data, slog.New(slog.DiscardHandler))
			if err != nil || !slices.Equal(gone, []string{dir}) || len(left) != 0 {
				t.Fatalf("removeLeftovers() = gone %q, left %q, %v; want %s gone", gone, left, err, dir)
			}
			if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("leftover %s still there: %v", dir, err)
			}
		})
	}
}

// TestScratchRemovalKeepsTheHeldFileUntilTheDataIsGone: a removal that
// stops inside data/ (here a mount point in the copy, which no unlink
// removes; a kill -9 stops it the same way) leaves the held file in
// place, so the next rehearsal still knows the directory for a scratch
// directory and removes it.
func TestScratchRemovalKeepsTheHeldFileUntilTheDataIsGone(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := newScratch(data)
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, s.data(), map[string]string{"a": "a", "z": "z"}, nil)
	writeTree(t, s.state(), map[string]string{"home/x": "x"}, nil)
	mnt := filepath.Join(s.data(), "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		testenv.Missing(t, "mount a tmpfs (needs root): "+err.Error())
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
	})
	if err := s.remove(context.Background()); err == nil {
		t.Fatal("remove() = nil with a mount point in data/; want it stopped there")
	}
	if _, err := os.Lstat(filepath.Join(s.dir, HeldFile)); err != nil {
		t.Fatalf("the held file after a removal stopped inside data/: %v; want it still there", err)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	gone, _, err := removeLeftovers(context.Background(), data, slog.New(slog.DiscardHandler))
	if err != nil || !slices.Equal(gone, []string{s.dir}) {
		t.Fatalf("removeLeftovers() = %q, %v; want %s removed", gone, err, s.dir)
	}
}

// TestRunLeavesALiveRehearsalAlone: while a second copy of hbx rehearses
// the same data (it holds the rehearsal lock, its scratch directory and
// the held file in it), a rehearsal is refused naming the holder, and
// neither kills that copy nor touches its scratch directory; once that
// copy is killed with -9, the next rehearsal removes what it left and
// runs.
func TestRunLeavesALiveRehearsalAlone(t *testing.T) {
	rp := newRunParams(t, "serve", false)
	killEscapees(t, rp)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	other := exec.Command(self)
	other.Env = append(os.Environ(), holderEnv+"="+rp.DataDir)
	other.Stderr = os.Stderr
	stdin, err := other.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := other.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() { other.Process.Kill(); <-exited })
	line, err := bufio.NewReader(out).ReadString('\n')
	go func() { other.Wait(); close(exited) }()
	if err != nil {
		t.Fatalf("the second copy printed no scratch directory: %v", err)
	}
	dir := line[:len(line)-1]
	writeTree(t, filepath.Join(dir, "data"), map[string]string{"data.db": "the other copy's"}, nil)

	_, err = Run(context.Background(), rp.options(slog.New(slog.DiscardHandler)))
	if !lock.IsLocked(err) || !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("Run() beside a live rehearsal = %v; want it refused, the lock held", err)
	}
	if !alive(other) {
		t.Fatal("Run killed the live rehearsal's hbx")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "data", "data.db")); err != nil || string(b) != "the other copy's" {
		t.Errorf("the live rehearsal's copy after Run: %q, %v; want it untouched", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, HeldFile)); err != nil {
		t.Errorf("the live rehearsal's held file after Run: %v", err)
	}

	if err := other.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("the second copy outlived SIGKILL by a minute")
	}
	res, err := Run(context.Background(), rp.options(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("Run() after the other copy died = %v", err)
	}
	if !slices.Contains(res.Leftovers, dir) {
		t.Errorf("Run() removed leftovers %q; want the killed copy's %s", res.Leftovers, dir)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed copy's scratch directory %s: %v; want it gone", dir, err)
	}
}

// TestRunRefusesAPlantedRehearsalLock: a symlink where the rehearsal
// lock goes is refused (lock.ErrNotRegular) before anything is copied,
// and the error does not claim that another rehearsal runs.
func TestRunRefusesAPlantedRehearsalLock(t *testing.T) {
	rp := newRunParams(t, "serve", false)
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Symlink(target, datadir.RehearsalLock(rp.DataDir)); err != nil {
		t.Fatal(err)
	}
	before := entries(t, filepath.Dir(rp.DataDir))
	_, err := Run(context.Background(), rp.options(slog.New(slog.DiscardHandler)))
	if !errors.Is(err, lock.ErrNotRegular) || strings.Contains(err.Error(), "another rehearsal") {
		t.Fatalf("Run() with a symlink for its lock = %v; want lock.ErrNotRegular, not \"another rehearsal\"", err)
	}
	if after := entries(t, filepath.Dir(rp.DataDir)); !slices.Equal(after, before) {
		t.Errorf("the data directory's parent after the refusal: %q, before: %q", after, before)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the symlink's target %s: %v; want it never made", target, err)
	}
}

// entries is the names in dir, sorted.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
