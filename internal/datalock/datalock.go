package datalock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/fsat"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/procscan"
)

// ErrBusy is wrapped by the errors of Check and Acquire when a process
// holds the data directory's lock. Use errors.As(*BusyError) for details.
var ErrBusy = errors.New("data directory in use")

// ErrMountPoint is wrapped by Acquire's error for a data directory that
// is the root of a mount.
var ErrMountPoint = errors.New("data directory is a mount point")

// Path returns the lock file of dataDir: beside it, named after it
// (datadir.Lock), "/workspace/executor/data" ->
// "/workspace/executor/.data.lock". An
// existing dataDir is resolved first (symlinks followed), so every path
// that reaches the directory through symlinks names one lock; one reached
// through a bind mount of the directory itself is a mount point, which
// Acquire refuses (issue 25 item 5).
func Path(dataDir string) string {
	return datadir.Lock(resolve(dataDir))
}

// resolve returns dataDir cleaned, with its symlinks resolved when it
// exists.
func resolve(dataDir string) string {
	d := filepath.Clean(dataDir)
	if r, err := filepath.EvalSymlinks(d); err == nil {
		d = r
	}
	return d
}

// checkIdentity makes sure the lock beside dataDir is its only lock: an
// existing dataDir must not be the root of a mount (a bind mount of the
// directory elsewhere has a parent, and so a lock, of its own), and the
// directory beside the lock must be dataDir by device and inode. A
// missing dataDir is no error: nothing else can reach it yet.
func checkIdentity(dataDir string) error {
	var want, got unix.Stat_t
	if err := unix.Stat(dataDir, &want); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return fmt.Errorf("stat data directory: %w", err)
	}
	beside := resolve(dataDir)
	if mnt, err := fsat.IsMountRoot(beside); err != nil {
		return fmt.Errorf("check data directory: %w", err)
	} else if mnt {
		return fmt.Errorf("%w: %s is a mount point (the root of a mount): another path to the same directory would find another lock, and a restore cannot swap it (mount the volume on its parent)", ErrMountPoint, dataDir)
	}
	if err := unix.Lstat(beside, &got); err != nil || got.Dev != want.Dev || got.Ino != want.Ino {
		return fmt.Errorf("check data directory: %s changed while its lock was looked up", dataDir)
	}
	return nil
}

// ownerPath is the owner lock beside Path.
func ownerPath(dataDir string) string { return datadir.LockOwner(resolve(dataDir)) }

// BusyError says who holds a data directory's lock.
type BusyError struct {
	DataDir string
	// Owner is the live owner, or the dead owner whose leftovers hold the
	// lock (then Leftovers is true); zero when unknown.
	Owner lock.Holder
	// Leftovers: no owner lives; Processes are what it left running.
	Leftovers bool
	// Processes hold the data lock open (the payload; leftovers when the
	// owner is dead). Nil when none could be seen.
	Processes []procscan.Process
}

func (e *BusyError) Error() string {
	if !e.Leftovers {
		return fmt.Sprintf("%v: %s is held by %s (lock %s)", ErrBusy, e.DataDir, e.Owner, Path(e.DataDir))
	}
	who := "processes not visible in /proc to this user"
	if len(e.Processes) > 0 {
		who = names(e.Processes)
	}
	return fmt.Sprintf("%v: %s is held by %s, left running by %s, which is gone (lock %s)", ErrBusy, e.DataDir, who, e.Owner, Path(e.DataDir))
}

// Unwrap returns ErrBusy.
func (e *BusyError) Unwrap() error { return ErrBusy }

// names renders procs as holders are named, "pid 12 (bun) since
// 2026-01-02T03:04:05Z, pid 13 (sh) since ..." ("since" left out when
// unknown).
func names(procs []procscan.Process) string {
	s := make([]string, len(procs))
	for i, p := range procs {
		s[i] = "pid " + p.String()
		if !p.Since.IsZero() {
			s[i] += " since " + p.Since.UTC().Format(time.RFC3339)
		}
	}
	return strings.Join(s, ", ")
}

// Check returns nil when no process holds dataDir's lock (a missing lock
// file is a free lock), else a *BusyError naming the holder. It creates
// nothing and takes no lock.
func Check(dataDir string) error {
	dataPin, err := procscan.PinPath(Path(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check data lock: %w", err)
	}
	defer dataPin.Close()
	pins := []*procscan.Pin{dataPin}
	ownerPin, oerr := procscan.PinPath(ownerPath(dataDir))
	if oerr == nil {
		defer ownerPin.Close()
		pins = append(pins, ownerPin)
	}
	m, err := procscan.Openers(pins...)
	if err != nil {
		return fmt.Errorf("check data lock: %w", err)
	}
	if oerr == nil && len(m[ownerPin]) > 0 {
		return &BusyError{DataDir: dataDir, Owner: liveHolder(ownerPath(dataDir), m[ownerPin]), Processes: m[dataPin]}
	}
	if len(m[dataPin]) == 0 {
		return nil
	}
	return &BusyError{DataDir: dataDir, Owner: lock.ReadHolder(Path(dataDir)), Leftovers: true, Processes: m[dataPin]}
}

// liveHolder is the holder recorded at path when it is among openers, else
// the first opener.
func liveHolder(path string, openers []procscan.Process) lock.Holder {
	h := lock.ReadHolder(path)
	if slices.ContainsFunc(openers, func(p procscan.Process) bool { return p.PID == h.PID }) {
		return h
	}
	return lock.Holder{PID: openers[0].PID, Command: openers[0].Command, Since: openers[0].Since}
}

// Options configure Acquire.
type Options struct {
	// Command names this owner in others' errors, e.g. "hbx supervise".
	Command string
	// StopLeftovers lets Acquire stop what a dead owner left holding the
	// data lock: StopSignal (0: SIGTERM), then SIGKILL after StopWait.
	// Without it Acquire refuses, naming them.
	StopLeftovers bool
	StopSignal    syscall.Signal
	StopWait      time.Duration
}

// Lock is a held data lock.
type Lock struct {
	owner *lock.Lock
	f     *os.File
	path  string
	// Stopped lists the leftovers Acquire stopped; Killed says whether
	// any needed SIGKILL.
	Stopped []procscan.Process
	Killed  bool
}

// Acquire takes dataDir's lock: the owner lock, then the data lock. It
// creates the parent directory (0755) and the lock files (0600) when
// missing. A live owner makes it fail with a *BusyError at once; leftovers
// of a dead owner are stopped (Options.StopLeftovers) or named in a
// *BusyError. A data directory that is a mount point is ErrMountPoint.
func Acquire(ctx context.Context, dataDir string, o Options) (*Lock, error) {
	if err := checkIdentity(dataDir); err != nil {
		return nil, err
	}
	if err := fsat.MkdirAll(filepath.Dir(Path(dataDir)), 0o755); err != nil {
		return nil, fmt.Errorf("create data lock directory: %w", err)
	}
	owner, err := acquireOwner(ctx, dataDir, o)
	if err != nil {
		return nil, err
	}
	l := &Lock{owner: owner, path: Path(dataDir)}
	ok := false
	defer func() {
		if !ok {
			l.Release()
		}
	}()
	f, err := lock.OpenFile(Path(dataDir))
	if err != nil {
		return nil, fmt.Errorf("open data lock: %w", err)
	}
	l.f = f
	if err := l.flockData(ctx, dataDir, o); err != nil {
		return nil, err
	}
	h := lock.Holder{PID: os.Getpid(), Command: o.Command, Since: time.Now().UTC()}
	b, _ := json.Marshal(h)
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(append(b, '\n'), 0)
	}
	ok = true
	return l, nil
}

// acquireOwner takes the owner lock of dataDir at once; a live owner is a
// *BusyError naming it and the processes that hold the data lock open.
func acquireOwner(ctx context.Context, dataDir string, o Options) (*lock.Lock, error) {
	owner, err := lock.Acquire(ctx, ownerPath(dataDir), o.Command, 0, nil)
	if err != nil {
		var held *lock.HeldError
		if errors.As(err, &held) {
			be := &BusyError{DataDir: dataDir, Owner: held.Holder}
			if pin, err := procscan.PinPath(Path(dataDir)); err == nil {
				if m, err := procscan.Openers(pin); err == nil {
					be.Processes = m[pin]
				}
				pin.Close()
			}
			return nil, be
		}
		return nil, err
	}
	return owner, nil
}

// flockData takes the flock of l's data lock file, under the owner lock:
// no owner lives, so whoever holds it was left by a dead one. Those
// leftovers are a *BusyError (Leftovers), or, with o.StopLeftovers, are
// stopped (l.Stopped, l.Killed) and the flock taken again.
func (l *Lock) flockData(ctx context.Context, dataDir string, o Options) error {
	f := l.f
	pin, err := procscan.PinFile(f)
	if err != nil {
		return err
	}
	defer pin.Close()
	deadline := time.Now().Add(time.Second)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("flock %s: %w", Path(dataDir), err)
		}
		m, err := procscan.Openers(pin)
		if err != nil {
			return err
		}
		left := m[pin]
		if len(left) == 0 && time.Now().Before(deadline) {
			// Gone between the flock and the scan, or not visible.
			if err := sleep(ctx, 50*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		be := &BusyError{DataDir: dataDir, Owner: lock.ReadHolder(Path(dataDir)), Leftovers: true, Processes: left}
		if !o.StopLeftovers || len(left) == 0 {
			return be
		}
		sig := o.StopSignal
		if sig == 0 {
			sig = syscall.SIGTERM
		}
		stopped, killed, err := procscan.Stop(ctx, pin, sig, o.StopWait, 0)
		l.Stopped, l.Killed = append(l.Stopped, stopped...), l.Killed || killed
		if err != nil {
			return fmt.Errorf("stop leftovers of %s: %w", be.Owner, err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// File returns the data lock file, to pass to the payload as an inherited
// descriptor (exec.Cmd.ExtraFiles, syscall.ProcAttr.Files): the lock is
// then held while any process of the payload lives.
func (l *Lock) File() *os.File { return l.f }

// Path returns the data lock file's path.
func (l *Lock) Path() string { return l.path }

// Release closes this process's descriptors of both locks. It does not
// unlock the data lock's flock: a payload process that still holds an
// inherited descriptor keeps it (a later Acquire sees its leftovers).
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	var err error
	if l.f != nil {
		err = l.f.Close()
		l.f = nil
	}
	if l.owner != nil {
		if uerr := l.owner.Unlock(); err == nil {
			err = uerr
		}
		l.owner = nil
	}
	return err
}
