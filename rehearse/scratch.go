package rehearse

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/procscan"
)

// HeldFile is the file in the scratch directory that the rehearsed
// payload inherits open (after launch's marker, as its fd 3): the next
// Run finds whatever of an abandoned rehearsal still runs by it.
const HeldFile = ".held"

// scratch is one rehearsal's private directory beside the data directory.
type scratch struct {
	dir  string   // <data_dir>.rehearsal-<random>
	held *os.File // dir/HeldFile, open
}

// data and state are the copy's data and state directories.
func (s *scratch) data() string  { return filepath.Join(s.dir, "data") }
func (s *scratch) state() string { return filepath.Join(s.dir, "state") }

// newScratch makes dataDir's scratch directory: created exclusively
// (os.MkdirTemp) beside dataDir, mode 0700, this process's until own
// gives it away.
func newScratch(dataDir string) (*scratch, error) {
	d := filepath.Clean(dataDir)
	dir, err := os.MkdirTemp(filepath.Dir(d), filepath.Base(datadir.Rehearsal.Path(d, "*")))
	if err != nil {
		return nil, fmt.Errorf("make the rehearsal's scratch directory: %w", err)
	}
	s := &scratch{dir: dir}
	if err := os.Chmod(dir, 0o700); err != nil {
		s.remove(context.Background())
		return nil, fmt.Errorf("make the rehearsal's scratch directory: %w", err)
	}
	if s.held, err = os.OpenFile(filepath.Join(dir, HeldFile), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
		s.remove(context.Background())
		return nil, fmt.Errorf("make the rehearsal's scratch directory: %w", err)
	}
	return s, nil
}

// own gives the scratch directory to the owner of dataDir (when this
// process is root), mode 0700 still, so the payload's user reaches its
// copy and only it.
func (s *scratch) own(dataDir string) error {
	st, err := os.Stat(dataDir)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || os.Geteuid() != 0 {
		return nil
	}
	return os.Chown(s.dir, int(sys.Uid), int(sys.Gid))
}

// remove closes the held file, SIGKILLs whatever of the rehearsal still
// holds it, and removes the directory. It finds them by the file it
// holds open, never by the name: the directory was the payload's, and a
// link it put at HeldFile must not choose what is killed.
func (s *scratch) remove(ctx context.Context) error {
	if s.held != nil {
		pin, err := procscan.PinFile(s.held)
		s.held.Close()
		s.held = nil
		if err != nil {
			return err
		}
		defer pin.Close()
		if _, _, err := procscan.Stop(context.WithoutCancel(ctx), pin, syscall.SIGKILL, 0, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return removeScratchTree(s.dir)
}

// removeScratchTree removes the scratch directory dir in the order that
// leaves, wherever a kill -9 stops it, what the next rehearsal removes:
// everything but the held file and the cgroup record first (data/ and
// state/, contents and all), then the record (its cgroup is already
// gone), then the held file (the marker the next rehearsal knows a
// scratch directory by), then dir, empty by then (the next rehearsal
// removes an empty one too). It stops at the first error, the held file
// still in place.
func removeScratchTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		// The payload's directory, made unreadable: it is removed anyway.
		_ = os.Chmod(dir, 0o700)
		if ents, err = os.ReadDir(dir); err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
	}
	for _, e := range ents {
		if n := e.Name(); n != HeldFile && n != CgroupRecord {
			if err := datadir.RemoveTree(filepath.Join(dir, n)); err != nil {
				return err
			}
		}
	}
	for _, n := range []string{CgroupRecord, HeldFile} {
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
	}
	return datadir.RemoveTree(dir)
}

// removeLeftovers removes every scratch directory an earlier rehearsal
// of dataDir left (hbx killed), after SIGKILLing what still holds its
// held file; it returns their paths, and those of the directories named
// like one that it left alone: without the held file hbx makes first in
// a scratch directory, a directory named <data_dir>.rehearsal-* is not
// one (another box's data directory, an operator's copy), or it is one
// whose held file the payload replaced, which must not choose what is
// killed. What still runs in the cgroup a leftover records
// (CgroupRecord) is SIGKILLed and the cgroup removed first, each process
// logged to log; the directory is removed held file last
// (removeScratchTree), and an empty one (a removal killed after its held
// file) is removed too. The caller holds the rehearsal lock
// (datadir.RehearsalLock), so every scratch directory found is a killed
// rehearsal's, never a running one's.
func removeLeftovers(ctx context.Context, dataDir string, log *slog.Logger) (gone, left []string, err error) {
	d := filepath.Clean(dataDir)
	ents, err := os.ReadDir(filepath.Dir(d))
	if err != nil {
		return nil, nil, fmt.Errorf("look for rehearsal leftovers: %w", err)
	}
	for _, e := range ents {
		if !datadir.Rehearsal.Of(filepath.Base(d), e.Name()) || !e.IsDir() {
			continue
		}
		p := filepath.Join(filepath.Dir(d), e.Name())
		ours, err := stopHolders(ctx, filepath.Join(p, HeldFile))
		if err != nil {
			return gone, left, fmt.Errorf("stop what runs in the rehearsal leftover %s: %w", p, err)
		}
		if !ours {
			// Empty: a removal killed after the held file, its last
			// entry (os.Remove removes nothing else).
			if os.Remove(p) == nil {
				gone = append(gone, p)
			} else {
				left = append(left, p)
			}
			continue
		}
		if err := stopLeftover(ctx, recordedCgroup(p, dataDir), log); err != nil {
			return gone, left, fmt.Errorf("stop what runs in the rehearsal leftover %s: %w", p, err)
		}
		if err := removeScratchTree(p); err != nil {
			return gone, left, fmt.Errorf("remove the rehearsal leftover: %w", err)
		}
		gone = append(gone, p)
	}
	return gone, left, nil
}

// stopHolders SIGKILLs every process that holds held open, when it is
// the held file a rehearsal made (ours): the regular file of this user
// with its one name. A missing held, or one the payload (whose the
// directory was) replaced by a symbolic or hard link to another file, is
// not: nothing is killed.
func stopHolders(ctx context.Context, held string) (ours bool, err error) {
	fd, err := unix.Open(held, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", held, err)
	}
	f := os.NewFile(uintptr(fd), held)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("stat %s: %w", held, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Nlink != 1 {
		return false, nil
	}
	pin, err := procscan.PinFile(f)
	if err != nil {
		return false, err
	}
	defer pin.Close()
	_, _, err = procscan.Stop(ctx, pin, syscall.SIGKILL, 0, 50*time.Millisecond)
	return true, err
}
