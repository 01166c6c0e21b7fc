package supervisor

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// EarlySignals is the signal handling of a process between its start and
// its supervisor's Run (taking the data lock, stopping leftovers of a
// dead supervisor, recovering an interrupted change): every signal of
// Signals means what it means to a running supervisor, so a stop signal
// ends the start and the others are logged and ignored, none ends the
// process.
type EarlySignals struct {
	ch     chan os.Signal
	done   chan struct{}
	silent atomic.Bool
}

// HandleEarlySignals catches every signal in Signals until Stop: a
// SignalStop one cancels the returned context (logged on log), the others
// are logged (SIGPIPE, also raised by the process's own writes to a
// closed connection, is not) and ignored. After Quiet, signals are still
// caught (so none ends the process between this handler and Run's own)
// but left to the supervisor, which handles them too.
func HandleEarlySignals(parent context.Context, log *slog.Logger) (context.Context, *EarlySignals) {
	ctx, cancel := context.WithCancel(parent)
	e := &EarlySignals{ch: make(chan os.Signal, 8), done: make(chan struct{})}
	sigs := make([]os.Signal, 0, len(Signals))
	for sig := range Signals {
		sigs = append(sigs, sig)
	}
	signal.Notify(e.ch, sigs...)
	go func() {
		defer cancel()
		for {
			select {
			case <-e.done:
				return
			case v := <-e.ch:
				if e.silent.Load() {
					continue
				}
				sig := v.(syscall.Signal)
				if Signals[sig] == SignalStop {
					log.Info("signal: stopping before any program started", "signal", unix.SignalName(sig))
					cancel()
					continue
				}
				if sig != syscall.SIGPIPE {
					log.Info("signal: ignored while the supervisor starts", "signal", unix.SignalName(sig))
				}
			}
		}
	}()
	return ctx, e
}

// Quiet leaves every signal to the running supervisor.
func (e *EarlySignals) Quiet() { e.silent.Store(true) }

// Stop ends the early handling (and cancels its context).
func (e *EarlySignals) Stop() {
	signal.Stop(e.ch)
	close(e.done)
}
