// Package lock is the one flock(2) per state directory that serialises hbx
// commands (install, backup, restore). The kernel releases the lock when its
// holder dies, so there is no stale-lock heuristic; the file's content names
// the current holder (PID, command, since when) for error messages.
package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrLocked is wrapped by the error Acquire returns when another process
// holds the lock past the wait. Use IsLocked or errors.As(*HeldError).
var ErrLocked = errors.New("locked by another process")

// Holder describes the process holding a lock.
type Holder struct {
	PID     int       `json:"pid"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
}

func (h Holder) String() string {
	if h.PID == 0 {
		return "an unknown process"
	}
	return fmt.Sprintf("pid %d (%s) since %s", h.PID, h.Command, h.Since.UTC().Format(time.RFC3339))
}

// HeldError reports who holds the lock.
type HeldError struct {
	Path   string
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s is held by %s", e.Path, e.Holder)
}

// Unwrap makes errors.Is(err, ErrLocked) true.
func (e *HeldError) Unwrap() error { return ErrLocked }

// IsLocked reports whether err says a lock was held by someone else.
func IsLocked(err error) bool { return errors.Is(err, ErrLocked) }

// Lock is a held lock. Release it with Unlock.
type Lock struct {
	f *os.File
	// outer is the lock a nested Lock stands for (Acquire under
	// WithHeld): it identifies the same file, and Unlock leaves it held.
	outer *Lock
}

// ErrNotRegular: a lock file is a symlink or not a regular file. Whoever
// planted it (in a directory they could write) would have hbx, as root,
// truncate and write its holder record through it.
var ErrNotRegular = errors.New("lock file is a symlink or not a regular file")

// OpenFile opens the lock file at path for reading and writing, creating
// it 0600 when missing, without following a symlink in its place; a
// symlink or anything but a regular file wraps ErrNotRegular and nothing
// is written.
func OpenFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("open lock %s: %w", path, ErrNotRegular)
	}
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open lock %s: %w", path, ErrNotRegular)
	}
	return f, nil
}

// Acquire takes the exclusive lock on path (created 0600 if missing),
// polling until wait has passed (0: try once). command describes this
// holder for others' messages. onWait, if not nil, is called once with the
// current holder when Acquire has to wait.
//
// Under a context from WithHeld naming this same lock file, Acquire returns
// at once with a nested Lock whose Unlock does nothing.
func Acquire(ctx context.Context, path, command string, wait time.Duration, onWait func(Holder)) (*Lock, error) {
	if held, ok := ctx.Value(heldKey{}).(*Lock); ok && held.is(path) {
		for held.outer != nil {
			held = held.outer
		}
		return &Lock{outer: held}, nil
	}
	f, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	warned := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("flock %s: %w", path, err)
		}
		holder := readHolder(path)
		if time.Now().After(deadline) {
			f.Close()
			return nil, &HeldError{Path: path, Holder: holder}
		}
		if !warned && onWait != nil {
			onWait(holder)
			warned = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for lock %s: %w", path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	h := Holder{PID: os.Getpid(), Command: command, Since: time.Now().UTC()}
	b, _ := json.Marshal(h)
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(append(b, '\n'), 0)
	}
	return &Lock{f: f}, nil
}

// heldKey is the context key of WithHeld.
type heldKey struct{}

// WithHeld returns a context saying that this process holds l. A command
// that holds the lock and calls an operation that takes the same lock
// itself (restore re-pulling the runtime with the installer) passes it down
// this way, instead of deadlocking on its own flock. Only Acquire of the
// same file (same device and inode) is affected.
func WithHeld(ctx context.Context, l *Lock) context.Context {
	return context.WithValue(ctx, heldKey{}, l)
}

// is reports whether l holds the lock file at path.
func (l *Lock) is(path string) bool {
	for l != nil && l.outer != nil {
		l = l.outer
	}
	if l == nil || l.f == nil {
		return false
	}
	var a, b unix.Stat_t
	if unix.Fstat(int(l.f.Fd()), &a) != nil || unix.Stat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

func readHolder(path string) Holder {
	var h Holder
	b, err := os.ReadFile(path)
	if err == nil {
		_ = json.Unmarshal([]byte(strings.TrimSpace(string(b))), &h)
	}
	return h
}

// File returns the open lock file (nil for a nested Lock). A child that
// inherits it (exec.Cmd.ExtraFiles, syscall.ProcAttr.Files) shares the
// open file description and so keeps the flock held after this process
// exits, until the last process holding it does. Unlock releases the flock
// for all of them.
func (l *Lock) File() *os.File {
	if l == nil {
		return nil
	}
	return l.f
}

// ReadHolder returns the holder recorded in the lock file at path (zero
// when none can be read). The record is only meaningful while the lock is
// held.
func ReadHolder(path string) Holder { return readHolder(path) }

// Unlock releases the lock. The file stays (removing it would race with a
// waiter that already opened it).
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	// Unlock explicitly: a child forked meanwhile may still share the open
	// file description until it execs, and would keep the flock alive.
	err := unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}
