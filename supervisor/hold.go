package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/lock"
)

// HeldPath is the file beside the control socket where a process holding
// on its start-up error (HoldOnError) keeps that error: <socket>.held.
func HeldPath(socket string) string { return socket + ".held" }

// ErrHolding is wrapped by the error CheckHeld returns: no supervisor
// serves the socket, and a live process holds on its start-up error.
var ErrHolding = errors.New("did not start and holds on its error")

// HeldError is a live hold's start-up error, as CheckHeld reads it from
// the held file: PID is the holding process (in its own pid namespace),
// Msg its one-line error. It wraps ErrHolding and, since no supervisor
// runs, ErrNotRunning.
type HeldError struct {
	PID int
	Msg string
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("hbx supervise (pid %d) %v: %s", e.PID, ErrHolding, e.Msg)
}

// Unwrap makes errors.Is(err, ErrHolding) and errors.Is(err,
// ErrNotRunning) true.
func (e *HeldError) Unwrap() []error { return []error{ErrHolding, ErrNotRunning} }

// DialHeld is Dial, but when no supervisor answers on socket and a live
// process holds on its start-up error for it, the error is that
// *HeldError (still ErrNotRunning) instead of "nothing listens".
func DialHeld(ctx context.Context, socket string) (*Client, error) {
	c, err := Dial(ctx, socket)
	if errors.Is(err, ErrNotRunning) {
		if herr := CheckHeld(socket); herr != nil {
			return nil, herr
		}
	}
	return c, err
}

// CheckHeld returns a *HeldError when a live process holds on its
// start-up error for socket (see HoldOnError), nil when none does, or the
// error reading the held file.
func CheckHeld(socket string) error {
	msg, pid, ok, err := ReadHeld(HeldPath(socket))
	if err != nil {
		return err
	}
	if !ok {
		return nil
	}
	return &HeldError{PID: pid, Msg: msg}
}

// HoldSignals catches every signal of Signals from its creation until
// Release or the end of Hold, so that none ends the process between a
// start that failed and the hold on its error: a stop signal (SignalStop)
// caught at any time in between ends the hold as soon as it begins, the
// others are ignored (and logged while holding).
type HoldSignals struct {
	ch      chan os.Signal
	done    chan struct{} // closed by Release
	stopped chan struct{} // closed at the first stop signal
	stopSig atomic.Int32  // that signal
	log     atomic.Pointer[slog.Logger]
	once    sync.Once
	release sync.Once
}

// CatchHoldSignals starts catching every signal of Signals for a
// possible hold (HoldSignals.Hold); call Release when the process does
// not hold.
func CatchHoldSignals() *HoldSignals {
	h := &HoldSignals{ch: make(chan os.Signal, 16), done: make(chan struct{}), stopped: make(chan struct{})}
	sigs := make([]os.Signal, 0, len(Signals))
	for sig := range Signals {
		sigs = append(sigs, sig)
	}
	signal.Notify(h.ch, sigs...)
	go h.loop()
	return h
}

// loop records the first stop signal and logs the others while holding.
func (h *HoldSignals) loop() {
	for {
		var v os.Signal
		select {
		case <-h.done:
			return
		case v = <-h.ch:
		}
		sig := v.(syscall.Signal)
		log := h.log.Load()
		switch {
		case Signals[sig] == SignalStop:
			h.once.Do(func() {
				h.stopSig.Store(int32(sig))
				close(h.stopped)
			})
			if log != nil {
				log.Info("signal: stopping the hold", "signal", unix.SignalName(sig))
			}
		case log != nil && sig != syscall.SIGPIPE:
			log.Info("signal: ignored while holding", "signal", unix.SignalName(sig))
		}
	}
}

// Release stops catching the signals (their handling returns to whatever
// else catches them, or their default action).
func (h *HoldSignals) Release() {
	h.release.Do(func() {
		signal.Stop(h.ch)
		close(h.done)
	})
}

// HoldOnError is CatchHoldSignals().Hold: signals that arrive before it
// are not caught by it.
func HoldOnError(ctx context.Context, log *slog.Logger, held string, cause error) error {
	return CatchHoldSignals().Hold(ctx, log, held, cause)
}

// Hold keeps a process whose supervisor could not start up, so a
// container's PID 1 stays up with its error instead of exiting into a
// restart loop: it takes the held file (held; "" takes none; its
// directory created 0755) with an exclusive flock kept for the life of
// the process and writes "<pid>\n<cause>\n" in it (mode 0600), makes the
// process a child subreaper and reaps every child on SIGCHLD, ignores the
// signals of Signals that do not stop, and returns cause once a
// SignalStop signal has arrived (also before Hold began, since h was
// created) or ctx ends, removing held first. The kernel drops the flock
// when the process dies however it dies, so readers (ReadHeld) know a
// live hold by its lock, never by a pid. Failing to take held (another
// live hold keeps its own error there) is logged, not fatal.
func (h *HoldSignals) Hold(ctx context.Context, log *slog.Logger, held string, cause error) error {
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	defer h.Release()
	h.log.Store(log)
	if err := setSubreaper(); err != nil {
		log.Warn("hold: not a child subreaper", "err", err)
	}
	if held != "" {
		f, err := takeHeld(held, cause)
		if err != nil {
			log.Warn("hold: write the start-up error for hbx health", "path", held, "err", err)
		} else {
			defer releaseHeld(held, f)
		}
	}
	select {
	case <-h.stopped:
		log.Info("signal: stopping the hold (the signal came during the start)", "signal", unix.SignalName(syscall.Signal(h.stopSig.Load())))
		return cause
	default:
	}
	log.Info("hold: the supervisor did not start; staying up with its error until TERM, INT or QUIT", "pid", os.Getpid())
	reapAll()
	for {
		select {
		case <-ctx.Done():
			return cause
		case <-h.stopped:
			return cause
		case <-chld:
			reapAll()
		}
	}
}

// reapAll collects every exited child without blocking.
func reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}

// heldLockWait bounds how long takeHeld and RemoveStaleHeld retry a
// held file's flock: a reader (ReadHeld) holds a shared one for the time
// of a read; a live hold holds it for good.
const heldLockWait = 2 * time.Second

// lockHeldFile opens path (created 0600 when create is set, never through
// a symlink) and takes its exclusive flock, retrying for heldLockWait;
// the lock is on the file path names when it returns (one unlinked or
// replaced meanwhile is let go and path opened again). busy is true when
// a live hold keeps the lock; f is nil then, or when path does not exist
// and create is not set.
func lockHeldFile(path string, create bool) (f *os.File, busy bool, err error) {
	deadline := time.Now().Add(heldLockWait)
	for {
		if create {
			f, err = lock.OpenFile(path)
		} else {
			f, err = os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
			if errors.Is(err, os.ErrNotExist) {
				return nil, false, nil
			}
		}
		if err != nil {
			return nil, false, err
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			if time.Now().After(deadline) {
				return nil, true, nil
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			f.Close()
			return nil, false, fmt.Errorf("flock %s: %w", path, err)
		}
		if samePath(f, path) {
			return f, false, nil
		}
		f.Close()
	}
}

// samePath reports whether path still names the file open as f.
func samePath(f *os.File, path string) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	pi, err := os.Lstat(path)
	return err == nil && os.SameFile(fi, pi)
}

// takeHeld takes the held file at path for this process and writes this
// pid and cause (one line) in it; the returned file keeps its flock. The
// file is not made durable: it means something only while its holder
// lives, which no crash outlives.
func takeHeld(path string, cause error) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, busy, err := lockHeldFile(path, true)
	if err != nil {
		return nil, err
	}
	if busy {
		return nil, fmt.Errorf("take %s: another live hold keeps its error there", path)
	}
	msg := strings.ReplaceAll(cause.Error(), "\n", " ")
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"+msg+"\n"), 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// releaseHeld removes the held file this process holds as f (its lock
// makes sure path still names it: whoever replaces or removes a held file
// takes its lock first) and lets the lock go.
func releaseHeld(path string, f *os.File) {
	if samePath(f, path) {
		_ = os.Remove(path)
	}
	_ = f.Close()
}

// RemoveStaleHeld removes the held file at path when no live process
// holds it (its holder died: the kernel dropped its flock); a live hold's
// file is left alone. A missing file is no error.
func RemoveStaleHeld(path string) error {
	f, busy, err := lockHeldFile(path, false)
	if err != nil || busy || f == nil {
		return err
	}
	defer f.Close()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// ReadHeld returns the start-up error that a live process holds on (see
// HoldSignals.Hold) through the held file path, and that process's pid
// as the file names it. A hold is live while it keeps the file's flock:
// ok is false when there is no such file, or no process holds its lock
// (its holder died: a stale file, whatever pid it names). err is set when
// the file cannot be read, is not root's (nor this user's when hbx does
// not run as root), or a live one is malformed. It only reads (and
// takes a shared flock for an instant).
func ReadHeld(path string) (msg string, pid int, ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return "", 0, false, fmt.Errorf("read %s: %w", path, lock.ErrNotRegular)
	}
	// Only a hold of root (or of this user, when hbx does not run as
	// root) writes it: another user's file is planted text.
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid != 0 && int(uid) != os.Geteuid() {
		return "", 0, false, fmt.Errorf("read %s: owned by uid %d, not root: its text is not believed", path, uid)
	}
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); {
	case err == nil:
		return "", 0, false, nil // no holder: stale
	case !errors.Is(err, unix.EWOULDBLOCK):
		return "", 0, false, fmt.Errorf("read %s: flock: %w", path, err)
	}
	// A live hold: it writes its error right after taking the lock.
	deadline := time.Now().Add(heldLockWait)
	for {
		b, err := io.ReadAll(io.NewSectionReader(f, 0, 64<<10))
		if err != nil {
			return "", 0, false, fmt.Errorf("read %s: %w", path, err)
		}
		first, rest, _ := strings.Cut(string(b), "\n")
		pid, err = strconv.Atoi(first)
		if err == nil && pid > 0 && strings.HasSuffix(rest, "\n") {
			return strings.TrimSpace(rest), pid, true, nil
		}
		if time.Now().After(deadline) {
			return "", 0, false, fmt.Errorf("read %s: does not hold a pid and an error line", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
