package supervisor

import (
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"gopkg.in/natefinch/lumberjack.v2"
)

// SignalAction is what Run does with a signal under
// Options.HandleSignals.
type SignalAction int

// The actions.
const (
	// SignalIgnore logs the signal and does nothing else.
	SignalIgnore SignalAction = iota
	// SignalStop stops every program (reverse priority order) and makes
	// Run return nil: hbx supervise exits 0.
	SignalStop
	// SignalReopen reopens every program log file (what logrotate's
	// postrotate sends, supervisord's USR1) and logs it.
	SignalReopen
)

// Signals maps the signals whose default action ends a process to what
// the supervisor does with them. The others:
//
//   - SIGKILL and SIGSTOP cannot be caught (after SIGKILL, the next
//     supervisor stops what this one left: Options.StateDir).
//   - SIGPROF belongs to Go's profiler, whose handler ignores it when no
//     profile runs: no effect, and not logged.
//   - 32, 33 and 34 are reserved for the C library's threads; Go's runtime
//     neither catches nor ignores them, so they still end the process.
//     Nothing sends them to another process in practice.
//   - SIGCHLD, SIGCONT, SIGURG and SIGWINCH do not end a process; SIGTSTP,
//     SIGTTIN and SIGTTOU stop it (as PID 1 the kernel does not deliver
//     them).
//
// A SIGSEGV, SIGBUS, SIGFPE or SIGILL raised by a fault of hbx itself is a
// crash whatever this table says; sent with kill(2), they are ignored.
var Signals = map[syscall.Signal]SignalAction{
	syscall.SIGTERM: SignalStop,
	syscall.SIGINT:  SignalStop,
	syscall.SIGQUIT: SignalStop,

	syscall.SIGHUP:  SignalReopen,
	syscall.SIGUSR1: SignalReopen,

	syscall.SIGUSR2:   SignalIgnore,
	syscall.SIGALRM:   SignalIgnore,
	syscall.SIGPIPE:   SignalIgnore,
	syscall.SIGVTALRM: SignalIgnore,
	syscall.SIGXCPU:   SignalIgnore,
	syscall.SIGXFSZ:   SignalIgnore,
	syscall.SIGSTKFLT: SignalIgnore,
	syscall.SIGIO:     SignalIgnore,
	syscall.SIGPWR:    SignalIgnore,
	syscall.SIGSYS:    SignalIgnore,
	syscall.SIGTRAP:   SignalIgnore,
	syscall.SIGABRT:   SignalIgnore,
	syscall.SIGSEGV:   SignalIgnore,
	syscall.SIGBUS:    SignalIgnore,
	syscall.SIGFPE:    SignalIgnore,
	syscall.SIGILL:    SignalIgnore,
}

// The real-time signals a Go program may catch (35..64 on Linux; see
// Signals for 32..34) end a process by default too: they are ignored.
func init() {
	for n := 35; n <= 64; n++ {
		Signals[syscall.Signal(n)] = SignalIgnore
	}
}

// handleSignals acts on Signals until stop is called.
func (s *Supervisor) handleSignals() (stop func()) {
	ch := make(chan os.Signal, 8)
	sigs := make([]os.Signal, 0, len(Signals))
	for sig := range Signals {
		sigs = append(sigs, sig)
	}
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case v := <-ch:
				sig := v.(syscall.Signal)
				switch Signals[sig] {
				case SignalStop:
					s.log.Info("signal: stopping every program, then exiting", "signal", signalName(sig))
					s.Shutdown()
				case SignalReopen:
					n, err := s.reopenLogs()
					if err != nil {
						s.log.Error("signal: reopen log files", "signal", signalName(sig), "reopened", n, "err", err)
					} else {
						s.log.Info("signal: reopened log files", "signal", signalName(sig), "files", n)
					}
				default:
					if sig == syscall.SIGPIPE {
						// Once Notify asks for SIGPIPE, every write of
						// hbx's own to a closed connection (a released
						// hold) raises one too: not worth a warning.
						s.log.Debug("signal ignored", "signal", signalName(sig))
						continue
					}
					s.log.Warn("signal ignored", "signal", signalName(sig))
				}
			}
		}
	})
	return func() {
		signal.Stop(ch)
		close(done)
		wg.Wait()
	}
}

// reopenLogs closes and reopens every program log file, so output goes to
// a file at the configured path again after logrotate moved the old one.
func (s *Supervisor) reopenLogs() (int, error) {
	s.logMu.Lock()
	logs := s.logs
	s.logMu.Unlock()
	var first error
	for _, l := range logs {
		if err := l.reopen(); err != nil && first == nil {
			first = err
		}
	}
	return len(logs), first
}

// logWriter is one program log file that can be reopened.
type logWriter struct {
	lf     LogFile
	mu     sync.Mutex
	w      io.WriteCloser
	closed bool
}

func newLogWriter(lf LogFile) (*logWriter, error) {
	w, err := openLog(lf)
	if err != nil {
		return nil, err
	}
	return &logWriter{lf: lf, w: w}, nil
}

func (l *logWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *logWriter) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return l.w.Close()
}

// reopen closes the file and opens the configured path again. A rotated
// (lumberjack) log reopens its file at the next write.
func (l *logWriter) reopen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	if lj, ok := l.w.(*lumberjack.Logger); ok {
		return lj.Close()
	}
	w, err := openLog(l.lf)
	if err != nil {
		return err
	}
	old := l.w
	l.w = w
	return old.Close()
}
